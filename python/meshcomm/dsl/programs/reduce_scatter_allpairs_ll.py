"""Reduce-scatter over LL packets (small messages): every rank sends input chunk p as packets into rank p's
scratch slot for it (peer i on thread block i), then block 0 reduces its own chunk with the R-1 packet chunks
as they arrive. No semaphores."""
from .. import CollectiveProgram, MemoryChannel, Rank, ReduceScatter, all_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("reduce_scatter_allpairs_ll", ReduceScatter(R), protocol="LL",
                           max_message_size=1 << 18, instances=instances, inplace=inplace) as prog:
        for r in range(R):
            Rank(r).scratch(R)  # slot p: rank p's packets of this rank's chunk
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            for tb, p in enumerate(peers):
                MemoryChannel(dst=p, src=r).put_packets(Rank(p).scratch()[r], me.input[p], tb=tb)
            me.reduce_packets(me.output[0], me.input[r], [me.scratch()[p] for p in peers], tb=0)
    return prog
