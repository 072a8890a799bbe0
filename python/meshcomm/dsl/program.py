"""A collective program: the context in which ranks, buffers, channels and operations are declared, and its
compilation to a plan (checks, instances, in-place mapping, JSON). docs/dsl.md describes the model."""
import json
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional

from .collectives import CollectiveSpec
from .errors import DslError

PLAN_FORMAT = "meshcomm.plan"
PLAN_VERSION = 1
PROTOCOLS = ("Simple", "LL")
BUFFERS = ("input", "output", "scratch")

_current: List["CollectiveProgram"] = []


def current_program() -> "CollectiveProgram":
    if not _current:
        raise DslError("no CollectiveProgram is open: declare ranks, channels and operations inside "
                       "`with CollectiveProgram(...):`")
    return _current[-1]


@dataclass(frozen=True)
class Chunk:
    """A range of chunks of one rank's buffer: chunks index .. index + size - 1."""
    rank: int
    buffer: str
    index: int
    size: int

    def ref(self) -> dict:
        return {"buffer": self.buffer, "index": self.index, "size": self.size}

    def describe(self) -> str:
        return f"rank {self.rank} {self.buffer}[{self.index}:{self.index + self.size}]"


class BufferView:
    """``rank.input``, ``rank.output``, ``rank.scratch()``: indexing with an int or a slice gives a Chunk."""

    def __init__(self, rank: int, buffer: str):
        self.rank, self.buffer = rank, buffer

    def __getitem__(self, key) -> Chunk:
        if isinstance(key, int):
            return Chunk(self.rank, self.buffer, key, 1)
        if isinstance(key, slice):
            if key.step not in (None, 1) or key.start is None or key.stop is None:
                raise DslError(f"rank {self.rank} {self.buffer}[{key.start}:{key.stop}:{key.step}]: a chunk "
                               "range is start:stop with both given and no step")
            return Chunk(self.rank, self.buffer, key.start, key.stop - key.start)
        raise DslError(f"rank {self.rank} {self.buffer}[{key!r}]: index with an int or a slice")


@dataclass
class Op:
    """One operation of a rank's thread block, as recorded (before instances and in-place mapping)."""
    kind: str
    rank: int
    tb: int
    channel: Optional[int] = None  # position in the rank's channel list
    src: Optional[Chunk] = None
    dst: Optional[Chunk] = None
    srcs: List[Chunk] = field(default_factory=list)
    packets: List[Chunk] = field(default_factory=list)
    relaxed: bool = False
    threadblocks: List[int] = field(default_factory=list)
    index: int = -1  # position in its thread block (set when compiled)

    def chunks(self) -> List[Chunk]:
        return [c for c in (self.src, self.dst) if c is not None] + self.srcs + self.packets

    def chunk_slice(self, j: int) -> "Op":
        """This op on chunk j of each of its ranges alone (every range has the same size)."""
        one = lambda c: None if c is None else Chunk(c.rank, c.buffer, c.index + j, 1)  # noqa: E731
        return replace(self, src=one(self.src), dst=one(self.dst), srcs=[one(c) for c in self.srcs],
                       packets=[one(c) for c in self.packets])


@dataclass(frozen=True)
class ChannelDecl:
    type: str  # "memory" | "port"
    src: int  # the rank that owns it
    dst: int  # the peer
    index: int  # k-th channel of this type from src to dst


class CollectiveProgram:
    """``with CollectiveProgram(name, spec, protocol=...):`` collects a program; ``to_json()`` compiles it.

    protocol: "Simple" or "LL"; instances: every thread block and chunk replicated this many times;
    inplace: input and output are one buffer; min/max_message_size: the bytes of one rank's input the plan is
    meant for (the selector's range; an LL program must give max_message_size, its packet region's size);
    num_threads_per_block: the executor's block size (at most 512)."""

    def __init__(self, name: str, spec: CollectiveSpec, protocol: str = "Simple", instances: int = 1,
                 inplace: bool = False, min_message_size: int = 0, max_message_size: Optional[int] = None,
                 num_threads_per_block: int = 512):
        if not name:
            raise DslError("CollectiveProgram: a program needs a name")
        if protocol not in PROTOCOLS:
            raise DslError(f"program {name}: protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
        if instances < 1:
            raise DslError(f"program {name}: instances={instances}; at least 1")
        if max_message_size is None:
            if protocol == "LL":
                raise DslError(f"program {name}: an LL program needs max_message_size (its packet region is "
                               "sized for it)")
            max_message_size = 1 << 62
        if not 0 <= min_message_size <= max_message_size:
            raise DslError(f"program {name}: message sizes [{min_message_size}, {max_message_size}]")
        if num_threads_per_block % 32 or not 32 <= num_threads_per_block <= 512:
            raise DslError(f"program {name}: num_threads_per_block={num_threads_per_block}; a multiple of 32 "
                           "from 32 to 512")
        self.name, self.spec, self.protocol, self.instances = name, spec, protocol, instances
        self.inplace = inplace
        self.min_message_size, self.max_message_size = min_message_size, max_message_size
        self.num_threads_per_block = num_threads_per_block
        self.ops: List[Op] = []
        self.channels: Dict[int, List[ChannelDecl]] = {r: [] for r in range(spec.num_ranks)}
        self.scratch_chunks: Dict[int, int] = {r: 0 for r in range(spec.num_ranks)}

    # ---- context -------------------------------------------------------------------------------------
    def __enter__(self) -> "CollectiveProgram":
        _current.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.remove(self)

    @property
    def num_ranks(self) -> int:
        return self.spec.num_ranks

    def check_rank(self, rank: int, what: str) -> None:
        if not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise DslError(f"program {self.name}: {what}: rank {rank!r} outside 0..{self.num_ranks - 1}")

    # ---- recording -----------------------------------------------------------------------------------
    def add_channel(self, type_: str, src: int, dst: int) -> int:
        self.check_rank(src, f"{type_} channel source")
        self.check_rank(dst, f"{type_} channel destination")
        if src == dst:
            raise DslError(f"program {self.name}: rank {src}: a {type_} channel to itself")
        decls = self.channels[src]
        index = sum(1 for d in decls if d.type == type_ and d.dst == dst)
        decls.append(ChannelDecl(type_, src, dst, index))
        return len(decls) - 1

    def add_op(self, op: Op) -> None:
        self.check_rank(op.rank, f"{op.kind}")
        if not isinstance(op.tb, int) or op.tb < 0:
            raise DslError(f"program {self.name}: rank {op.rank}: {op.kind}: thread block {op.tb!r}; a "
                           "non-negative int")
        self.ops.append(op)

    def declare_scratch(self, rank: int, chunks: int) -> None:
        self.check_rank(rank, "scratch")
        if chunks < 0:
            raise DslError(f"program {self.name}: rank {rank}: scratch of {chunks} chunks")
        self.scratch_chunks[rank] = max(self.scratch_chunks[rank], chunks)

    # ---- compilation ---------------------------------------------------------------------------------
    def threadblocks(self) -> Dict[int, Dict[int, List[Op]]]:
        """rank -> tb -> its ops in order (each op's index set)."""
        blocks: Dict[int, Dict[int, List[Op]]] = {r: {} for r in range(self.num_ranks)}
        for op in self.ops:
            ops = blocks[op.rank].setdefault(op.tb, [])
            op.index = len(ops)
            ops.append(op)
        return blocks

    def buffer_chunks(self, rank: int, buffer: str) -> int:
        if buffer == "input":
            return self.spec.input_chunks
        if buffer == "output":
            return self.spec.output_chunks
        return self.scratch_chunks[rank]

    def compile(self) -> dict:
        """Checks the program (docs/dsl.md, "Checks while compiling") and returns the plan as a dict."""
        from . import checks  # the checks need the whole program model
        blocks = self.threadblocks()
        checks.check_program(self, blocks)
        return self._emit(blocks)

    def to_json(self) -> dict:
        return self.compile()

    def dumps(self) -> str:
        return dumps_plan(self.compile())

    def to_algorithm(self):
        """The compiled plan as a meshcomm.PlanAlgorithm (register it with comm.add_algorithm on every rank)."""
        import meshcomm  # the extension; compiling alone needs none
        return meshcomm.PlanAlgorithm.from_json(self.dumps())

    # ---- emission: instances and in-place mapping ----------------------------------------------------
    def _map_chunk(self, c: Chunk, instance: int) -> dict:
        k = self.instances
        index, size, buffer = c.index * k + instance * c.size, c.size, c.buffer
        if self.inplace and buffer != "scratch" and buffer != self.spec.inplace_buffer:
            index += self.spec.inplace_offset(c.rank) * k
            buffer = self.spec.inplace_buffer
        return {"buffer": buffer, "index": index, "size": size}

    def _emit_ops(self, op: Op, instance: int) -> List[dict]:
        """With instances, chunk c of instance i is chunk c * k + i, so a range of several chunks is not one range
        any more: its op is emitted once per chunk of the range."""
        size = max((c.size for c in op.chunks()), default=1)
        if self.instances == 1 or size == 1:
            return [self._emit_op(op, instance)]
        if any(c.size != size for c in op.chunks()):
            raise DslError(f"rank {op.rank} tb {op.tb} op {op.index} ({op.kind}): chunk ranges of different sizes "
                           f"({', '.join(c.describe() for c in op.chunks())}) cannot be split into instances")
        return [self._emit_op(op.chunk_slice(j), instance) for j in range(size)]

    def _emit_op(self, op: Op, instance: int) -> dict:
        k = self.instances
        out: dict = {"op": op.kind}
        if op.channel is not None:
            out["channel"] = op.channel * k + instance
        if op.kind in ("signal", "wait"):
            out["relaxed"] = op.relaxed
        if op.srcs or op.kind in ("reduce", "reduce_packets"):
            out["srcs"] = [self._map_chunk(c, instance) for c in op.srcs]
        if op.packets:
            out["packets"] = [self._map_chunk(c, instance) for c in op.packets]
        if op.src is not None:
            out["src"] = self._map_chunk(op.src, instance)
        if op.dst is not None:
            out["dst"] = self._map_chunk(op.dst, instance)
        if op.kind == "barrier":
            out["threadblocks"] = [tb * k + instance for tb in op.threadblocks]
        return out

    def _emit(self, blocks: Dict[int, Dict[int, List[Op]]]) -> dict:
        k = self.instances
        ranks = []
        for r in range(self.num_ranks):
            channels = [{"type": d.type, "peer": d.dst, "index": d.index * k + i}
                        for d in self.channels[r] for i in range(k)]
            tbs = []
            for tb in range(len(blocks[r])):
                for i in range(k):
                    tbs.append({"id": tb * k + i,
                                "ops": [d for op in blocks[r][tb] for d in self._emit_ops(op, i)]})
            ranks.append({"rank": r, "scratch_chunks": self.scratch_chunks[r] * k, "channels": channels,
                          "threadblocks": tbs})
        inplace_chunks = {"input": self.spec.input_chunks, "output": self.spec.output_chunks}
        return {
            "format": PLAN_FORMAT, "version": PLAN_VERSION, "name": self.name,
            "collective": self.spec.name, "num_ranks": self.num_ranks, "protocol": self.protocol,
            "inplace": self.inplace, "instances": k, "chunks_per_unit": self.spec.chunks_per_rank * k,
            "input_chunks": inplace_chunks["input"] * k, "output_chunks": inplace_chunks["output"] * k,
            "min_message_size": self.min_message_size, "max_message_size": self.max_message_size,
            "num_threads_per_block": self.num_threads_per_block, "ranks": ranks,
        }


def dumps_plan(plan: dict) -> str:
    """The plan as JSON text with one channel and one op per line (reviewable diffs of golden files)."""
    def one(v) -> str:
        return json.dumps(v, separators=(", ", ": "))

    lines = ["{"]
    top = [k for k in plan if k != "ranks"]
    lines += [f"  {one(k)}: {one(plan[k])}," for k in top]
    lines.append('  "ranks": [')
    for ri, rank in enumerate(plan["ranks"]):
        lines.append(f'    {{"rank": {rank["rank"]}, "scratch_chunks": {rank["scratch_chunks"]},')
        lines.append('     "channels": [' + ", ".join(one(c) for c in rank["channels"]) + "],")
        lines.append('     "threadblocks": [')
        for ti, tb in enumerate(rank["threadblocks"]):
            lines.append(f'      {{"id": {tb["id"]}, "ops": [')
            lines += [f"        {one(op)}" + ("," if oi + 1 < len(tb["ops"]) else "") for oi, op in enumerate(tb["ops"])]
            lines.append("      ]}" + ("," if ti + 1 < len(rank["threadblocks"]) else ""))
        lines.append("    ]}" + ("," if ri + 1 < len(plan["ranks"]) else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
