"""Allgather over LL packets (small messages): every rank sends its input as packets into every peer's scratch
slot for it and unpacks each peer's packets into that peer's output slot as they arrive, peer i on thread block
i; its own input is copied on block 0. No semaphores."""
from .. import AllGather, CollectiveProgram, MemoryChannel, Rank, all_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("allgather_allpairs_ll", AllGather(R), protocol="LL", max_message_size=1 << 18,
                           instances=instances) as prog:
        for r in range(R):
            Rank(r).scratch(R)  # slot p: the packets of rank p
        for r in range(R):
            me = Rank(r)
            me.copy(me.output[r], me.input[0], tb=0)
            for tb, p in enumerate(all_peers(r, R)):
                MemoryChannel(dst=p, src=r).put_packets(Rank(p).scratch()[r], me.input[0], tb=tb)
                me.unpack_packets(me.output[p], me.scratch()[p], tb=tb)
    return prog
