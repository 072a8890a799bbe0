"""Allreduce in two shots over memory channels (Simple): the input is cut into R parts of R-1 chunks; each rank
puts part p into rank p's scratch slot for it and signals (a thread block per peer); rank p waits for its R-1
peers, its blocks reduce its part into its output (one chunk each), then it puts the result into every peer's
output and signals. A peer writes into a scratch slot again
only in the next call, after the owner's second signal, which follows its reduction."""
from .. import AllReduce, CollectiveProgram, MemoryChannel, Rank, all_peers
from .phases import reduce_scatter_phase, send_to_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    S = max(1, R - 1)  # a rank's part is S chunks, one per thread block, so every block reduces
    with CollectiveProgram("allreduce_twoshot", AllReduce(R, chunks_per_rank=R * S), min_message_size=1 << 16,
                           instances=instances, inplace=inplace) as prog:
        channels = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R * S)  # slot p: rank p's part of chunk r
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            reduce_scatter_phase(me, peers, channels[r], lambda j: me.output[r * S + j], slot_of=lambda q: q,
                                 chunk_of=lambda q: q, parts=S)
            send_to_peers(me, peers, channels[r], me.output[r * S:(r + 1) * S],
                          lambda p: Rank(p).output[r * S:(r + 1) * S], after_reduction=True)
    return prog
