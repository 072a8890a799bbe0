"""Alltoall over memory channels (Simple): each rank copies its own part, puts part p into rank p's output slot
for it with one thread block per peer, and waits for its peers on the same blocks. Not in place: a peer's put
would overwrite parts of the one buffer this rank has not sent yet (alltoall_allpairs_ll runs in place)."""
from .. import AllToAll, CollectiveProgram, DslError, MemoryChannel, Rank, all_peers

IN_PLACE = False


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    if inplace:
        raise DslError("alltoall_fullmesh does not run in place: the peers put straight into the one buffer, over "
                       "parts this rank has not sent yet; use alltoall_allpairs_ll")
    with CollectiveProgram("alltoall_fullmesh", AllToAll(R), instances=instances, inplace=inplace) as prog:
        for r in range(R):
            me = Rank(r)
            me.copy(me.output[r], me.input[r], tb=0)
            for tb, p in enumerate(all_peers(r, R)):
                ch = MemoryChannel(dst=p, src=r)
                ch.put(Rank(p).output[r], me.input[p], tb=tb, signal=True)
                ch.wait(tb=tb)
    return prog
