"""Reduce-scatter over memory channels (Simple): each rank puts its chunk for rank p into p's scratch slot for
it and signals; after its R-1 waits it reduces its own chunk with the slots into its output. The next call's
puts into this rank's scratch follow this reduction through the executor's entry barrier (every rank's next
call starts after its previous one ended)."""
from .. import CollectiveProgram, MemoryChannel, Rank, ReduceScatter, all_peers
from .phases import reduce_scatter_phase


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    S = max(1, R - 1)  # a rank's part is S chunks, one per thread block, so every block reduces
    with CollectiveProgram("reduce_scatter_fullmesh", ReduceScatter(R, chunks_per_rank=S),
                           instances=instances, inplace=inplace) as prog:
        channels = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R * S)  # slot p: rank p's part for this rank
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            reduce_scatter_phase(me, peers, channels[r], lambda j: me.output[j], slot_of=lambda q: q,
                                 chunk_of=lambda q: q, parts=S)
    return prog
