"""The compiler's checks (docs/dsl.md, "Checks while compiling"): per operation (buffers, bounds, geometry,
channel kinds, protocol), then across ranks (channel pairing, barriers, signal/wait matching, LL packets, no
deadlock). Each error names the program, rank, thread block and operation."""
from collections import defaultdict, deque
from typing import Dict, List, Tuple

from .errors import DslError
from .program import Chunk, CollectiveProgram, Op

Blocks = Dict[int, Dict[int, List[Op]]]
Node = Tuple[int, int, int]  # (rank, tb, op index)

DATA_BUFFERS = ("input", "output")


def describe(prog: CollectiveProgram, op: Op) -> str:
    if op.channel is None:
        return op.kind
    d = prog.channels[op.rank][op.channel]
    return f"{op.kind} on {d.type} channel {d.index} to rank {d.dst}"


def where(prog: CollectiveProgram, op: Op) -> str:
    return f"program {prog.name}: rank {op.rank}, tb {op.tb}, op {op.index} ({describe(prog, op)})"


def fail(prog: CollectiveProgram, op: Op, why: str) -> None:
    raise DslError(f"{where(prog, op)}: {why}")


# ---- per operation -------------------------------------------------------------------------------------

# kind -> (channel types allowed (None: no channel), LL only)
KINDS = {
    "copy": (None, False), "reduce": (None, False), "put": (("memory", "port"), False),
    "get": (("memory",), False), "signal": (("memory", "port"), False), "wait": (("memory", "port"), False),
    "flush": (("port",), False), "put_packets": (("memory",), True), "unpack_packets": (None, True),
    "reduce_packets": (None, True), "barrier": (None, False),
}


def check_chunk(prog: CollectiveProgram, op: Op, c: Chunk, rank: int, what: str) -> None:
    if not isinstance(c, Chunk):
        fail(prog, op, f"{what} is {c!r}, not a chunk (rank.input[i:j], ...)")
    if c.rank != rank:
        side = "local" if rank == op.rank else f"rank {rank}'s"
        fail(prog, op, f"{what} {c.describe()} must be {side}")
    total = prog.buffer_chunks(c.rank, c.buffer)
    if c.index < 0 or c.size < 1 or c.index + c.size > total:
        fail(prog, op, f"{what} {c.describe()} is outside rank {c.rank}'s {c.buffer} of {total} chunks")
    if prog.inplace and c.buffer != "scratch" and c.buffer != prog.spec.inplace_buffer:
        smaller = prog.spec.input_chunks if c.buffer == "input" else prog.spec.output_chunks
        if c.index + c.size > smaller:
            fail(prog, op, f"{what} {c.describe()} is outside the in-place {c.buffer} of {smaller} chunks")


def check_geometry(prog: CollectiveProgram, op: Op, refs: List[Tuple[str, Chunk]]) -> None:
    """Input/output references of one op: equal size and equal phase (index mod chunks_per_rank)."""
    data = [(w, c) for w, c in refs if c.buffer in DATA_BUFFERS]
    sized = [(w, c) for w, c in refs]
    u = prog.spec.chunks_per_rank
    for w, c in sized[1:]:
        if c.size != sized[0][1].size:
            fail(prog, op, f"{w} {c.describe()} and {sized[0][0]} {sized[0][1].describe()} differ in size")
    for w, c in data[1:]:
        if (c.index - data[0][1].index) % u:
            fail(prog, op, f"{w} {c.describe()} and {data[0][0]} {data[0][1].describe()} lie at different "
                           f"positions in their units of {u} chunks, so their element counts can differ")


def check_op(prog: CollectiveProgram, op: Op) -> None:
    channels, ll_only = KINDS[op.kind]
    if ll_only and prog.protocol != "LL":
        fail(prog, op, "LL packet operations need protocol='LL'")
    peer = op.rank
    if channels is not None:
        d = prog.channels[op.rank][op.channel]
        if d.type not in channels:
            fail(prog, op, f"{op.kind} needs a {' or '.join(channels)} channel")
        peer = d.dst
    me = op.rank
    refs: List[Tuple[str, Chunk]] = []
    if op.kind in ("copy", "unpack_packets"):
        refs = [("dst", op.dst), ("src", op.src)]
        for w, c in refs:
            check_chunk(prog, op, c, me, w)
        if op.kind == "unpack_packets" and op.src.buffer != "scratch":
            fail(prog, op, f"src {op.src.describe()}: packets are read from scratch")
    elif op.kind in ("put", "put_packets"):
        check_chunk(prog, op, op.src, me, "src")
        check_chunk(prog, op, op.dst, peer, "dst")
        if op.kind == "put_packets" and op.dst.buffer != "scratch":
            fail(prog, op, f"dst {op.dst.describe()}: packets go into the peer's scratch")
        if op.kind == "put" and prog.channels[op.rank][op.channel].type == "port":
            for w, c in (("src", op.src), ("dst", op.dst)):
                if c.buffer != "scratch":
                    fail(prog, op, f"{w} {c.describe()}: a put on a port channel moves scratch to the peer's "
                                   "scratch (its proxy copies registered memory only); stage data with copy")
        refs = [("dst", op.dst), ("src", op.src)]
    elif op.kind == "get":
        check_chunk(prog, op, op.dst, me, "dst")
        check_chunk(prog, op, op.src, peer, "src")
        refs = [("dst", op.dst), ("src", op.src)]
    elif op.kind == "reduce":
        if len(op.srcs) < 2:
            fail(prog, op, f"reduce needs at least 2 sources, got {len(op.srcs)}")
        refs = [("dst", op.dst)] + [(f"srcs[{i}]", c) for i, c in enumerate(op.srcs)]
        for w, c in refs:
            check_chunk(prog, op, c, me, w)
    elif op.kind == "reduce_packets":
        if not op.packets:
            fail(prog, op, "reduce_packets needs at least one packet chunk")
        refs = ([("dst", op.dst)] + [(f"srcs[{i}]", c) for i, c in enumerate(op.srcs)] +
                [(f"packets[{i}]", c) for i, c in enumerate(op.packets)])
        for w, c in refs:
            check_chunk(prog, op, c, me, w)
        for i, c in enumerate(op.packets):
            if c.buffer != "scratch":
                fail(prog, op, f"packets[{i}] {c.describe()}: packets are read from scratch")
    elif op.kind == "barrier":
        tbs = op.threadblocks
        if len(set(tbs)) != len(tbs) or len(tbs) < 2 or op.tb not in tbs:
            fail(prog, op, f"barrier over thread blocks {tbs}: at least 2 distinct blocks, this one included")
    if prog.protocol == "LL" and not ll_only:
        for w, c in refs:
            if c.buffer == "scratch":
                fail(prog, op, f"{w} {c.describe()}: an LL program's scratch holds packets only")
    if refs:
        check_geometry(prog, op, refs)


# Thread blocks of one rank's plan, instances included (the loader's meshcomm::plan::kMaxThreadBlocks).
MAX_THREAD_BLOCKS = 128


def check_threadblock_ids(prog: CollectiveProgram, blocks: Blocks) -> None:
    for r, tbs in blocks.items():
        if sorted(tbs) != list(range(len(tbs))):
            raise DslError(f"program {prog.name}: rank {r} uses thread blocks {sorted(tbs)}; number them "
                           f"0..n-1 with no gaps")
        if len(tbs) * prog.instances > MAX_THREAD_BLOCKS:
            raise DslError(f"program {prog.name}: rank {r}: {len(tbs)} thread blocks x {prog.instances} "
                           f"instances; at most {MAX_THREAD_BLOCKS}")


# ---- across ranks --------------------------------------------------------------------------------------

def check_channel_pairing(prog: CollectiveProgram) -> None:
    have = {(d.type, d.src, d.dst, d.index) for decls in prog.channels.values() for d in decls}
    for decls in prog.channels.values():
        for d in decls:
            if (d.type, d.dst, d.src, d.index) not in have:
                raise DslError(f"program {prog.name}: rank {d.src}'s {d.type} channel {d.index} to rank {d.dst} "
                               f"has no partner: rank {d.dst} declares {d.index} such channel(s) to rank {d.src} "
                               f"(declare {d.type.capitalize()}Channel(dst={d.src}, src={d.dst}))")


def _channel_key(prog: CollectiveProgram, op: Op) -> Tuple[str, int, int, int]:
    d = prog.channels[op.rank][op.channel]
    return d.type, d.src, d.dst, d.index


def semaphore_edges(prog: CollectiveProgram, blocks: Blocks) -> List[Tuple[Node, Node]]:
    """The k-th signal on a -> b pairs with the k-th wait on b's paired channel; counts must match."""
    signals, waits = defaultdict(list), defaultdict(list)
    for r in range(prog.num_ranks):
        for tb in sorted(blocks[r]):
            for op in blocks[r][tb]:
                if op.kind == "signal":
                    signals[_channel_key(prog, op)].append(op)
                elif op.kind == "wait":
                    t, src, dst, index = _channel_key(prog, op)
                    waits[(t, dst, src, index)].append(op)  # keyed by the signalling side
    edges = []
    for key in sorted(set(signals) | set(waits)):
        s, w = signals.get(key, []), waits.get(key, [])
        if len(s) != len(w):
            t, src, dst, index = key
            op = (w or s)[-1]
            fail(prog, op, f"rank {src} signals {t} channel {index} to rank {dst} {len(s)} time(s) and rank "
                           f"{dst} waits on it {len(w)} time(s)")
        if len({op.tb for op in s}) > 1 or len({op.tb for op in w}) > 1:
            op = s[0]
            fail(prog, op, "the signals (or waits) of one channel come from several thread blocks: their order "
                           "is undefined; give each thread block its own channel")
        edges += [((a.rank, a.tb, a.index), (b.rank, b.tb, b.index)) for a, b in zip(s, w)]
    return edges


def packet_edges(prog: CollectiveProgram, blocks: Blocks) -> List[Tuple[Node, Node]]:
    """Every scratch chunk a rank waits for packets in is sent by exactly one put_packets and read."""
    writers: Dict[Tuple[int, int], Op] = {}
    readers: Dict[Tuple[int, int], List[Op]] = defaultdict(list)
    for op in prog.ops:
        if op.kind == "put_packets":
            for i in range(op.dst.index, op.dst.index + op.dst.size):
                key = (op.dst.rank, i)
                if key in writers:
                    fail(prog, op, f"packets into rank {op.dst.rank} scratch[{i}] are also sent by "
                                   f"{where(prog, writers[key])}: a packet chunk has one sender per call")
                writers[key] = op
        for c in (op.packets if op.kind == "reduce_packets" else [op.src] if op.kind == "unpack_packets" else []):
            for i in range(c.index, c.index + c.size):
                readers[(c.rank, i)].append(op)
    edges = []
    for key, ops in readers.items():
        if key not in writers:
            fail(prog, ops[0], f"waits for packets in rank {key[0]} scratch[{key[1]}], which no put_packets "
                               "sends: it would wait forever")
        w = writers[key]
        edges += [((w.rank, w.tb, w.index), (op.rank, op.tb, op.index)) for op in ops]
    for key, w in writers.items():
        if key not in readers:
            fail(prog, w, f"packets into rank {key[0]} scratch[{key[1]}] are never read")
    return edges


def barrier_edges(prog: CollectiveProgram, blocks: Blocks) -> Tuple[List[Tuple[object, object]], list]:
    """The n-th barrier over a set of blocks in each member: arrivals -> release -> each member's next op."""
    edges, releases = [], []
    for r in range(prog.num_ranks):
        by_set: Dict[Tuple[int, ...], Dict[int, List[Op]]] = defaultdict(lambda: defaultdict(list))
        for tb in sorted(blocks[r]):
            for op in blocks[r][tb]:
                if op.kind == "barrier":
                    by_set[tuple(sorted(op.threadblocks))][tb].append(op)
        for members, per_tb in by_set.items():
            counts = {tb: len(per_tb.get(tb, [])) for tb in members}
            if len(set(counts.values())) != 1:
                op = next(iter(next(iter(per_tb.values()))))
                fail(prog, op, f"barrier over thread blocks {list(members)}: each member must reach it the same "
                               f"number of times, but the counts are {counts}")
            for n in range(next(iter(counts.values()))):
                release = ("barrier", r, members, n)
                releases.append(release)
                for tb in members:
                    op = per_tb[tb][n]
                    edges.append(((r, tb, op.index), release))
                    if op.index + 1 < len(blocks[r][tb]):
                        edges.append((release, (r, tb, op.index + 1)))
    return edges, releases


def check_deadlock(prog: CollectiveProgram, blocks: Blocks, edges: list, extra_nodes: list) -> None:
    nodes = [(r, tb, i) for r in blocks for tb in blocks[r] for i in range(len(blocks[r][tb]))] + extra_nodes
    succ, indeg = defaultdict(list), {n: 0 for n in nodes}
    for r in blocks:
        for tb, ops in blocks[r].items():
            for i in range(len(ops) - 1):
                if ops[i].kind != "barrier":  # a barrier's successor hangs off its release
                    edges.append(((r, tb, i), (r, tb, i + 1)))
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = deque(n for n in nodes if indeg[n] == 0)
    seen = 0
    while ready:
        n = ready.popleft()
        seen += 1
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    if seen == len(nodes):
        return
    stuck = {n for n in nodes if indeg[n] > 0}
    pred = defaultdict(list)
    for a, b in edges:
        if a in stuck and b in stuck:
            pred[b].append(a)
    # Walk predecessors inside the stuck set until a node repeats: that is a cycle.
    n, path = next(n for n in stuck if pred[n]), []
    while n not in path:
        path.append(n)
        n = pred[n][0]
    cycle = path[path.index(n):][::-1]
    names = []
    for node in cycle:
        if node[0] == "barrier":
            names.append(f"rank {node[1]} barrier over thread blocks {list(node[2])}")
        else:
            r, tb, i = node
            names.append(f"rank {r}, tb {tb}, op {i} ({describe(prog, blocks[r][tb][i])})")
    raise DslError(f"program {prog.name}: deadlock: each waits for the next: " + " -> ".join(names) +
                   f" -> {names[0]}")


def check_program(prog: CollectiveProgram, blocks: Blocks) -> None:
    check_threadblock_ids(prog, blocks)
    for op in prog.ops:
        check_op(prog, op)
    check_channel_pairing(prog)
    edges = semaphore_edges(prog, blocks) + packet_edges(prog, blocks)
    b_edges, releases = barrier_edges(prog, blocks)
    check_deadlock(prog, blocks, edges + b_edges, releases)
