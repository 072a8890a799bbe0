"""Phases the shipped programs share, each recorded for one rank with peer i's operations on thread block i, so the
peers' puts, signals and waits run in parallel:

- reduce_scatter_phase: every peer's chunk goes into its scratch slot for this rank (put + signal), the rank waits
  for its peers, the peers' blocks meet, then block 0 reduces its own chunk with the peers' slots into ``dst``;
- send_to_peers: one chunk into every peer's buffer (put + signal), then a wait for every peer; with
  ``after_block0`` the blocks first meet, so the puts follow what block 0 did before (a reduction);
- relaxed_round: a relaxed signal and wait with every peer after the blocks meet (orders a later call's writes
  into this rank's scratch after its reads)."""
from typing import Callable, Dict, List

from .. import Chunk, MemoryChannel, Rank


def peer_blocks(peers: List[int]) -> List[int]:
    """The thread blocks of a phase: one per peer (at least one)."""
    return list(range(max(1, len(peers))))


def meet(me: Rank, peers: List[int]) -> None:
    """The phase's blocks meet (nothing with a single block)."""
    if len(peers) > 1:
        me.barrier(peer_blocks(peers))


def reduce_scatter_phase(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel], dst: Chunk,
                         slot_of: Callable[[int], int], chunk_of: Callable[[int], int]) -> None:
    """slot_of(q): rank q's scratch slot at its peers; chunk_of(q): the input chunk rank q owns."""
    for tb, p in enumerate(peers):
        channels[p].put(Rank(p).scratch()[slot_of(me.rank)], me.input[chunk_of(p)], tb=tb, signal=True)
        channels[p].wait(tb=tb)
    meet(me, peers)
    own = me.input[chunk_of(me.rank)]
    if peers:
        me.reduce(dst, [own] + [me.scratch()[slot_of(p)] for p in peers], tb=0)
    else:
        me.copy(dst, own, tb=0)


def send_to_peers(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel], src: Chunk,
                  dst_of: Callable[[int], Chunk], after_block0: bool = False) -> None:
    """dst_of(p): the chunk of peer p that receives ``src``."""
    if after_block0:
        meet(me, peers)
    for tb, p in enumerate(peers):
        channels[p].put(dst_of(p), src, tb=tb, signal=True)
        channels[p].wait(tb=tb)


def relaxed_round(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel]) -> None:
    meet(me, peers)
    for tb, p in enumerate(peers):
        channels[p].signal(tb=tb, relaxed=True)
        channels[p].wait(tb=tb, relaxed=True)
