"""Allreduce in two shots over memory channels (Simple) with the reduction beside the puts: the input is cut into
R parts of STEPS chunks. Put block i sends peer i its part's STEPS chunks back to back (into the peer's scratch
slot for this rank, each with a signal); the reduce block waits for step s from every peer, reduces it into
the output and meets the put blocks, which then put the reduced step into their peer's output (second channel
set, with a signal); finally each put block waits for its peer's STEPS reduced chunks. Step s is reduced while
later steps are still in flight. The next call's puts follow this call's reads through the executor's entry
barrier."""
from .. import AllReduce, CollectiveProgram, MemoryChannel, Rank, all_peers

STEPS = 4  # pipeline steps (chunks) of a rank's part


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R, S = num_ranks, STEPS
    with CollectiveProgram("allreduce_twoshot_pipelined", AllReduce(R, chunks_per_rank=R * S),
                           min_message_size=1 << 20, instances=instances, inplace=inplace) as prog:
        scatter = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        gather = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R * S)  # slot q * S + s: rank q's step s of this rank's part
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            reducer = len(peers)  # blocks 0 .. R-2 put (one per peer), block R-1 reduces
            blocks = list(range(len(peers) + 1))
            for tb, p in enumerate(peers):
                for s in range(S):
                    scatter[r][p].put(Rank(p).scratch()[r * S + s], me.input[p * S + s], tb=tb, signal=True)
            for s in range(S):
                mine = me.output[r * S + s]
                for p in peers:
                    scatter[r][p].wait(tb=reducer)
                me.reduce(mine, [me.input[r * S + s]] + [me.scratch()[p * S + s] for p in peers], tb=reducer)
                me.barrier(blocks)  # step s reduced: the put blocks send it
                for tb, p in enumerate(peers):
                    gather[r][p].put(Rank(p).output[r * S + s], mine, tb=tb, signal=True)
            for tb, p in enumerate(peers):
                for s in range(S):
                    gather[r][p].wait(tb=tb)
    return prog
