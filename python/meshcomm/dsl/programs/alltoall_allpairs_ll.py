"""Alltoall over LL packets (small messages): every rank sends input chunk p as packets into rank p's scratch
slot for it and unpacks each peer's packets into that peer's output slot as they arrive, peer i on thread block
i; its own chunk is copied on block 0. No semaphores."""
from .. import AllToAll, CollectiveProgram, MemoryChannel, Rank, all_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("alltoall_allpairs_ll", AllToAll(R), protocol="LL", max_message_size=1 << 18,
                           instances=instances) as prog:
        for r in range(R):
            Rank(r).scratch(R)  # slot p: rank p's packets for this rank
        for r in range(R):
            me = Rank(r)
            me.copy(me.output[r], me.input[r], tb=0)
            for tb, p in enumerate(all_peers(r, R)):
                MemoryChannel(dst=p, src=r).put_packets(Rank(p).scratch()[r], me.input[p], tb=tb)
                me.unpack_packets(me.output[p], me.scratch()[p], tb=tb)
    return prog
