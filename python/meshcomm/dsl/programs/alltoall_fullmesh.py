"""Alltoall over memory channels (Simple): each rank copies its own part, puts part p into rank p's output slot
for it with one thread block per peer, and waits for its peers on the same blocks."""
from .. import AllToAll, CollectiveProgram, MemoryChannel, Rank, all_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("alltoall_fullmesh", AllToAll(R), instances=instances) as prog:
        for r in range(R):
            me = Rank(r)
            me.copy(me.output[r], me.input[r], tb=0)
            for tb, p in enumerate(all_peers(r, R)):
                ch = MemoryChannel(dst=p, src=r)
                ch.put(Rank(p).output[r], me.input[p], tb=tb, signal=True)
                ch.wait(tb=tb)
    return prog
