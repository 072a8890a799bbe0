"""Phases the shipped programs share, each recorded for one rank on thread block ``tb``:

- reduce_scatter_phase: every peer's chunk goes into its scratch slot for this rank (put + signal), the rank waits
  for its peers, then reduces its own chunk with the peers' slots into ``dst``;
- send_to_peers: one chunk into every peer's buffer (put + signal), then a wait for every peer."""
from typing import Callable, Dict, List

from .. import Chunk, MemoryChannel, Rank


def reduce_scatter_phase(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel], dst: Chunk,
                         slot_of: Callable[[int], int], chunk_of: Callable[[int], int], tb: int = 0) -> None:
    """slot_of(q): rank q's scratch slot at its peers; chunk_of(q): the input chunk rank q owns."""
    for p in peers:
        channels[p].put(Rank(p).scratch()[slot_of(me.rank)], me.input[chunk_of(p)], tb=tb, signal=True)
    for p in peers:
        channels[p].wait(tb=tb)
    own = me.input[chunk_of(me.rank)]
    if peers:
        me.reduce(dst, [own] + [me.scratch()[slot_of(p)] for p in peers], tb=tb)
    else:
        me.copy(dst, own, tb=tb)


def send_to_peers(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel], src: Chunk,
                  dst_of: Callable[[int], Chunk], tb: int = 0) -> None:
    """dst_of(p): the chunk of peer p that receives ``src``."""
    for p in peers:
        channels[p].put(dst_of(p), src, tb=tb, signal=True)
    for p in peers:
        channels[p].wait(tb=tb)
