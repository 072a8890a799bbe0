"""Reduce-scatter over memory channels (Simple) with the reduction beside the puts: a rank's part is STEPS chunks;
put block i sends peer i its STEPS chunks back to back, each into the peer's scratch slot for this rank with a
signal, while the reduce block waits for step s from every peer and reduces it into the output, so step s is
reduced while later steps are still in flight. The next call's puts into this rank's scratch follow this
call's reductions through the executor's entry barrier."""
from .. import CollectiveProgram, MemoryChannel, Rank, ReduceScatter, all_peers

STEPS = 4  # pipeline steps (chunks) of a rank's part


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R, S = num_ranks, STEPS
    with CollectiveProgram("reduce_scatter_pipelined", ReduceScatter(R, chunks_per_rank=S),
                           min_message_size=1 << 20, instances=instances, inplace=inplace) as prog:
        channels = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R * S)  # slot q * S + s: rank q's step s for this rank
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            reducer = len(peers)  # blocks 0 .. R-2 put (one per peer), block R-1 reduces
            for tb, p in enumerate(peers):
                for s in range(S):
                    channels[r][p].put(Rank(p).scratch()[r * S + s], me.input[p * S + s], tb=tb, signal=True)
            for s in range(S):
                for p in peers:
                    channels[r][p].wait(tb=reducer)
                me.reduce(me.output[s], [me.input[r * S + s]] + [me.scratch()[p * S + s] for p in peers],
                          tb=reducer)
    return prog
