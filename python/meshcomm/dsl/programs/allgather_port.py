"""Allgather over port channels (Simple; the proxy's copy engine moves the data): each rank stages its input in
its scratch slot (thread block 0, then every block meets), puts the slot into every peer's scratch slot for this
rank with a signal and a flush on the peer's block, waits for the peer's slot and copies it into its output."""
from .. import AllGather, CollectiveProgram, PortChannel, Rank, all_peers
from .phases import meet, peer_blocks


def supports(num_ranks: int) -> bool:
    return num_ranks >= 2


def program(num_ranks: int, instances: int = 1, inplace: bool = False) -> CollectiveProgram:
    R = num_ranks
    with CollectiveProgram("allgather_port", AllGather(R), instances=instances, inplace=inplace) as prog:
        channels = {r: {p: PortChannel(dst=p, src=r) for p in all_peers(r, R)} for r in range(R)}
        for r in range(R):
            Rank(r).scratch(R)  # slot q: rank q's input
        for r in range(R):
            me, peers = Rank(r), all_peers(r, R)
            me.copy(me.output[r], me.input[0], tb=0)
            me.copy(me.scratch()[r], me.input[0], tb=0)
            meet(me, peers)
            for tb, p in zip(peer_blocks(peers), peers):
                channels[r][p].put(Rank(p).scratch()[r], me.scratch()[r], tb=tb, signal=True, flush=True)
                channels[r][p].wait(tb=tb)
                me.copy(me.output[p], me.scratch()[p], tb=tb)
    return prog
