"""Phases the shipped programs share, each recorded for one rank with peer i's operations on thread block i, so the
peers' puts, signals and waits run in parallel:

- reduce_scatter_phase: every peer's part goes into its scratch slot for this rank (put + signal), the rank waits
  for its peers, the peers' blocks meet, then the blocks reduce this rank's part with the peers' slots, one
  chunk of the part each;
- send_to_peers: one chunk (range) into every peer's buffer (put + signal), then a wait for every peer; with
  ``after_reduction`` the blocks first meet, so the puts follow the reduction they did before;
- exchange_packets (LL): this rank's own part copied to its output slot, and with every peer, on its block, the
  part for it sent as packets into the peer's scratch slot for this rank and the peer's packets unpacked into
  the peer's output slot."""
from typing import Callable, Dict, List

from .. import Chunk, DslError, MemoryChannel, Rank


def peer_blocks(peers: List[int]) -> List[int]:
    """The thread blocks of a phase: one per peer (at least one)."""
    return list(range(max(1, len(peers))))


def meet(me: Rank, peers: List[int]) -> None:
    """The phase's blocks meet (nothing with a single block)."""
    if len(peers) > 1:
        me.barrier(peer_blocks(peers))


def reduce_scatter_phase(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel],
                         dst_of: Callable[[int], Chunk], slot_of: Callable[[int], int],
                         chunk_of: Callable[[int], int], parts: int = 1) -> None:
    """A rank's part is ``parts`` consecutive chunks: chunk_of(q) is the first input chunk of rank q's part,
    slot_of(q) the scratch slot (of ``parts`` chunks) rank q's contribution lands in, dst_of(j) where chunk j
    of this rank's reduced part goes. After the blocks meet, block j reduces chunk j (parts <= the blocks)."""
    if len(peers) > 0 and parts > len(peers):
        raise DslError(f"reduce_scatter_phase of rank {me.rank}: {parts} parts but {len(peers)} blocks "
                       "(one per peer)")
    slot = slot_of(me.rank) * parts
    for tb, p in enumerate(peers):
        part = chunk_of(p) * parts
        channels[p].put(Rank(p).scratch()[slot:slot + parts], me.input[part:part + parts], tb=tb, signal=True)
        channels[p].wait(tb=tb)
    meet(me, peers)
    for j in range(parts):
        own = me.input[chunk_of(me.rank) * parts + j]
        if peers:
            me.reduce(dst_of(j), [own] + [me.scratch()[slot_of(p) * parts + j] for p in peers], tb=j)
        else:
            me.copy(dst_of(j), own, tb=j)


def send_to_peers(me: Rank, peers: List[int], channels: Dict[int, MemoryChannel], src: Chunk,
                  dst_of: Callable[[int], Chunk], after_reduction: bool = False) -> None:
    """dst_of(p): the chunk of peer p that receives ``src``; with after_reduction the blocks first meet (their
    reduction is complete)."""
    if after_reduction:
        meet(me, peers)
    for tb, p in enumerate(peers):
        channels[p].put(dst_of(p), src, tb=tb, signal=True)
        channels[p].wait(tb=tb)


def exchange_packets(me: Rank, peers: List[int], own: Chunk, part_for: Callable[[int], Chunk]) -> None:
    """own: this rank's part of its own output; part_for(p): the input chunk rank p receives. Every rank declares
    scratch slot q for rank q's packets."""
    me.copy(me.output[me.rank], own, tb=0)
    for tb, p in enumerate(peers):
        MemoryChannel(dst=p, src=me.rank).put_packets(Rank(p).scratch()[me.rank], part_for(p), tb=tb)
        me.unpack_packets(me.output[p], me.scratch()[p], tb=tb)
