"""Allreduce in two shots over memory channels (Simple): the input is cut into R chunks; each rank puts chunk p
into rank p's scratch slot for it and signals; rank p waits for its R-1 peers, reduces its chunk into its
output, then puts the result into every peer's output and signals. A peer writes into a scratch slot again
only in the next call, after the owner's second signal, which follows its reduction."""
from .. import AllReduce, CollectiveProgram, MemoryChannel, Rank, all_peers
from .phases import reduce_scatter_phase, send_to_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("allreduce_twoshot", AllReduce(R, chunks_per_rank=R), min_message_size=1 << 16,
                           instances=instances) as prog:
        channels = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R)  # slot p: rank p's chunk r
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            reduce_scatter_phase(me, peers, channels[r], me.output[r], slot_of=lambda q: q, chunk_of=lambda q: q)
            send_to_peers(me, peers, channels[r], me.output[r], lambda p: Rank(p).output[r], after_block0=True)
    return prog
