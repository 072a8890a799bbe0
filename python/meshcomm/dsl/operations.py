"""What a program calls: ``Rank`` (local operations and buffers) and the channels (``MemoryChannel``,
``PortChannel``; ``SwitchChannel`` raises, NVLink multicast being off). Every call records an Op in the open
CollectiveProgram; the checks run when it compiles."""
from typing import List, Sequence

from .errors import DslError
from .program import BufferView, Chunk, Op, current_program


class Rank:
    """Rank r of the open program: its buffers and its local operations."""

    def __init__(self, rank: int):
        self.program = current_program()
        self.program.check_rank(rank, "Rank")
        self.rank = rank

    @property
    def input(self) -> BufferView:
        return BufferView(self.rank, "input")

    @property
    def output(self) -> BufferView:
        return BufferView(self.rank, "output")

    def scratch(self, chunks: int = 0) -> BufferView:
        """This rank's scratch buffer, declared to hold at least ``chunks`` chunks (slots)."""
        self.program.declare_scratch(self.rank, chunks)
        return BufferView(self.rank, "scratch")

    def copy(self, dst: Chunk, src: Chunk, tb: int) -> None:
        self.program.add_op(Op("copy", self.rank, tb, src=src, dst=dst))

    def reduce(self, dst: Chunk, srcs: Sequence[Chunk], tb: int) -> None:
        """dst = srcs[0] (op) srcs[1] (op) ...; the reduce op is the call's."""
        self.program.add_op(Op("reduce", self.rank, tb, dst=dst, srcs=list(srcs)))

    def unpack_packets(self, dst: Chunk, src: Chunk, tb: int) -> None:
        """Waits for the LL packets in scratch ``src`` and copies their data to ``dst``."""
        self.program.add_op(Op("unpack_packets", self.rank, tb, src=src, dst=dst))

    def reduce_packets(self, dst: Chunk, src: Chunk, packets: Sequence[Chunk], tb: int) -> None:
        """Waits for each packet chunk; dst = src (op) packets... (``src`` may be None: packets alone)."""
        self.program.add_op(Op("reduce_packets", self.rank, tb, dst=dst, srcs=[] if src is None else [src],
                               packets=list(packets)))

    def barrier(self, tbs: Sequence[int]) -> None:
        """The listed thread blocks of this rank meet (records one barrier op in each)."""
        tbs = list(tbs)
        for tb in tbs:
            self.program.add_op(Op("barrier", self.rank, tb, threadblocks=tbs))


class _Channel:
    type = ""

    def __init__(self, dst: int, src: int):
        self.program = current_program()
        self.src, self.dst = src, dst
        self.channel = self.program.add_channel(self.type, src, dst)

    def _op(self, kind: str, tb: int, **fields) -> None:
        self.program.add_op(Op(kind, self.src, tb, channel=self.channel, **fields))

    def put(self, dst: Chunk, src: Chunk, tb: int, signal: bool = False) -> None:
        """Local ``src`` into the peer's ``dst``; with signal=True a signal follows."""
        self._op("put", tb, src=src, dst=dst)
        if signal:
            self.signal(tb)

    def signal(self, tb: int, relaxed: bool = False) -> None:
        self._op("signal", tb, relaxed=relaxed)

    def wait(self, tb: int, relaxed: bool = False) -> None:
        self._op("wait", tb, relaxed=relaxed)


class MemoryChannel(_Channel):
    """An NVLink channel from rank ``src`` to rank ``dst`` (owned by src)."""
    type = "memory"

    def get(self, dst: Chunk, src: Chunk, tb: int) -> None:
        """The peer's ``src`` into local ``dst``."""
        self._op("get", tb, src=src, dst=dst)

    def put_packets(self, dst: Chunk, src: Chunk, tb: int) -> None:
        """Local ``src`` into the peer's scratch ``dst`` as LL packets (LL programs)."""
        self._op("put_packets", tb, src=src, dst=dst)


class PortChannel(_Channel):
    """A proxy channel from rank ``src`` to rank ``dst`` (owned by src)."""
    type = "port"

    def put(self, dst: Chunk, src: Chunk, tb: int, signal: bool = False, flush: bool = False) -> None:
        super().put(dst, src, tb, signal=signal)
        if flush:
            self.flush(tb)

    def flush(self, tb: int) -> None:
        self._op("flush", tb)


class SwitchChannel:
    """NVLink multicast: off in meshcomm (never created)."""

    def __init__(self, *args, **kwargs):
        raise DslError("SwitchChannel: NVLink multicast is off in meshcomm; use memory channels")


def all_peers(rank: int, num_ranks: int) -> List[int]:
    return [p for p in range(num_ranks) if p != rank]
