"""Allreduce around a ring (Simple): R-1 reduce-scatter steps, each rank sending its running sum of one chunk to
the next rank's scratch slot for that step, then R-1 allgather steps putting the finished chunks into the
next rank's output. Bandwidth-optimal for large messages with one link per step."""
from .. import AllReduce, CollectiveProgram, MemoryChannel, Rank


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("allreduce_ring", AllReduce(R, chunks_per_rank=R), min_message_size=1 << 20,
                           instances=instances, inplace=inplace) as prog:
        nxt = {r: MemoryChannel(dst=(r + 1) % R, src=r) for r in range(R)}
        # With two ranks the next rank is also the previous one: one channel serves both directions.
        prv = nxt if R == 2 else {r: MemoryChannel(dst=(r - 1) % R, src=r) for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R - 1)  # slot s: the chunk received at reduce-scatter step s
        for r in range(R):
            me, after = Rank(r), Rank((r + 1) % R)
            for s in range(R - 1):
                sent = (r - s) % R  # the chunk this rank sends at step s
                nxt[r].put(after.scratch()[s], me.input[sent] if s == 0 else me.output[sent], tb=0, signal=True)
                prv[r].wait(tb=0)
                got = (r - s - 1) % R
                me.reduce(me.output[got], [me.input[got], me.scratch()[s]], tb=0)
            for s in range(R - 1):
                sent = (r + 1 - s) % R  # finished here at the last reduce step, or received at step s - 1
                nxt[r].put(after.output[sent], me.output[sent], tb=0, signal=True)
                prv[r].wait(tb=0)
    return prog
