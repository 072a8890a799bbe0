"""Alltoall over LL packets (small messages): every rank sends input chunk p as packets into rank p's scratch
slot for it and unpacks each peer's packets into that peer's output slot as they arrive, peer i on thread block
i; its own chunk is copied on block 0. No semaphores."""
from .. import AllToAll, CollectiveProgram, Rank, all_peers
from .phases import exchange_packets


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("alltoall_allpairs_ll", AllToAll(R), protocol="LL", max_message_size=1 << 18,
                           instances=instances, inplace=inplace) as prog:
        for r in range(R):
            Rank(r).scratch(R)  # slot p: rank p's packets for this rank
        for r in range(R):
            me = Rank(r)
            exchange_packets(me, all_peers(r, R), me.input[r], lambda p: me.input[p])
    return prog
