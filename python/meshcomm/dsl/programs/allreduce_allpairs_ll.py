"""Allreduce, one shot over LL packets (small messages): every rank sends its whole input as packets into
every peer's scratch slot for it, then reduces its input with the R-1 packet chunks as they arrive. One
thread block; no semaphores."""
from .. import AllReduce, CollectiveProgram, MemoryChannel, Rank, all_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    with CollectiveProgram("allreduce_allpairs_ll", AllReduce(num_ranks), protocol="LL",
                           max_message_size=1 << 18, instances=instances, inplace=inplace) as prog:
        for r in range(num_ranks):
            me = Rank(r)
            me.scratch(num_ranks)  # slot p: the packets of rank p
            for p in all_peers(r, num_ranks):
                peer = Rank(p)
                peer.scratch(num_ranks)
                MemoryChannel(dst=p, src=r).put_packets(peer.scratch()[r], me.input[0], tb=0)
            me.reduce_packets(me.output[0], me.input[0], [me.scratch()[p] for p in all_peers(r, num_ranks)], tb=0)
    return prog
