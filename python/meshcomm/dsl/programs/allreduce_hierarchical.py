"""Allreduce for two groups of GPUs (ranks 0..g-1 and g..2g-1), a pattern the native set does not have: the
groups talk only through rank pairs (i, i + g), the shape of two nodes or two NVLink islands joined by one link
per GPU. Within a group the input is cut into g chunks: (1) reduce-scatter in the group into scratch slots,
(2) each rank exchanges its partial chunk with its counterpart in the other group and adds it (the next call's
exchange follows this read through the executor's entry barrier), (3) allgather in the group."""
from .. import AllReduce, CollectiveProgram, MemoryChannel, Rank
from .phases import reduce_scatter_phase, send_to_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2 and num_ranks % 2 == 0


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R, g = num_ranks, num_ranks // 2
    with CollectiveProgram("allreduce_hierarchical", AllReduce(R, chunks_per_rank=g),
                           min_message_size=1 << 16, instances=instances, inplace=inplace) as prog:
        def group(r):
            base = r - r % g
            return [base + j for j in range(g)]

        local = {r: {p: MemoryChannel(dst=p, src=r) for p in group(r) if p != r} for r in range(R)}
        cross = {r: MemoryChannel(dst=(r + g) % R, src=r) for r in range(R)}
        for r in range(R):
            Rank(r).scratch(g + 1)  # slot j: group rank j's chunk; slot g: the other group's partial chunk
        for r in range(R):
            me, i, peers = Rank(r), r % g, [p for p in group(r) if p != r]
            reduce_scatter_phase(me, peers, local[r], lambda j: me.output[i], slot_of=lambda q: q % g,
                                 chunk_of=lambda q: q % g)
            other = Rank((r + g) % R)
            cross[r].put(other.scratch()[g], me.output[i], tb=0, signal=True)
            cross[r].wait(tb=0)
            me.reduce(me.output[i], [me.output[i], me.scratch()[g]], tb=0)
            send_to_peers(me, peers, local[r], me.output[i], lambda p: Rank(p).output[i], after_reduction=True)
    return prog
