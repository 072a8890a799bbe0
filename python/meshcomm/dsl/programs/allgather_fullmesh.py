"""Allgather over memory channels (Simple): each rank copies its input into its own output slot and puts it
into every peer's output slot, then waits for its R-1 peers."""
from .. import AllGather, CollectiveProgram, MemoryChannel, Rank, all_peers
from .phases import send_to_peers


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("allgather_fullmesh", AllGather(R), instances=instances, inplace=inplace) as prog:
        channels = {r: {p: MemoryChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            me = Rank(r)
            me.copy(me.output[r], me.input[0], tb=0)
            send_to_peers(me, all_peers(r, R), channels[r], me.input[0], lambda p: Rank(p).output[r])
    return prog
