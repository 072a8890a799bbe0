"""A host interpreter of plans (docs/dsl.md): runs every rank's thread blocks as cooperating tasks on Python
lists with the executor's semantics — chunk geometry, element counts, semaphores, LL packet arrival, barriers —
so a program's result can be checked against the collective's definition without a GPU, for any element
count. A plan that cannot finish raises DslError naming the blocked operations.

    outputs = run_plan(plan, n, inputs, op="sum")   # inputs[r]: rank r's input list
    assert outputs == expected_outputs(plan["collective"], inputs, n, op="sum")

By default every block runs as far as it can, in (rank, block) order. With ``seed`` the blocks interleave one
operation at a time in a random order that the semaphores, packets and barriers allow, as the GPU's blocks may:
a program whose result depends on the interleaving (e.g. an in-place program whose peers overwrite data before
it is sent) shows it under some seeds. ``output_view`` gives what the caller's output is in place.
``run_calls`` runs several calls back to back (scratch and semaphores carry over), as the executor does.
"""
import random
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Tuple

from .collectives import units
from .errors import DslError

REDUCERS: Dict[str, Callable[[int, int], int]] = {"sum": lambda a, b: a + b, "max": max, "min": min,
                                                   "prod": lambda a, b: a * b}


class _Geometry:
    """Element ranges of chunk references for n elements per unit. ``line``: a Simple plan's chunk is rounded up
    to a multiple of it (the executor rounds to 128-byte lines, 32 float32 elements; any c >= ceil(n / U) tiles
    a unit, so a correct program is correct for every line)."""

    def __init__(self, plan: dict, n: int, line: int = 1):
        self.u = plan["chunks_per_unit"]
        self.n = n
        self.c = -(-n // self.u)
        if plan["protocol"] == "Simple":
            self.c = -(-self.c // line) * line

    def data_range(self, index: int, size: int) -> Tuple[int, int]:
        def start(k):
            return (k // self.u) * self.n + min((k % self.u) * self.c, self.n)

        last = index + size - 1
        end = (last // self.u) * self.n + min((last % self.u + 1) * self.c, self.n)
        return start(index), end

    def range(self, ref: dict) -> Tuple[int, int]:
        if ref["buffer"] == "scratch":
            return ref["index"] * self.c, (ref["index"] + ref["size"]) * self.c
        return self.data_range(ref["index"], ref["size"])

    def count(self, refs: List[dict]) -> int:
        data = [r for r in refs if r["buffer"] != "scratch"] or refs
        return min(e - s for s, e in (self.range(r) for r in data))


class _Machine:
    """Calls of one plan back to back on every rank. Scratch (an LL plan's: the packet half of the call's parity)
    and semaphores persist across calls; each call has its own input and output buffers (a put reaches the
    peer's buffers of the same call, as the prologue's exchange of call buffers gives). A rank runs call c + 1
    only after all its blocks of call c ended (stream order); a plan with puts or gets first runs the executor's
    entry barrier on every rank (a signal to every peer, then a wait for every peer, on memory channel index 0)
    before its blocks start."""

    def __init__(self, plan: dict, n: int, calls: List[List[List[int]]], op: str, line: int = 1):
        self.plan, self.geo, self.reduce = plan, _Geometry(plan, n, line), REDUCERS[op]
        R = plan["num_ranks"]
        in_units, out_units = units(plan["collective"], R)
        # An LL plan's scratch is its packet region, whose halves alternate by call (the launch epoch's parity).
        halves = 2 if plan["protocol"] == "LL" else 1
        self.scratch = [[[None] * (rank["scratch_chunks"] * self.geo.c) for rank in plan["ranks"]]
                        for _ in range(halves)]
        self.bufs: List[List[Dict[str, list]]] = []
        for inputs in calls:
            per_rank = []
            for r in range(R):
                if len(inputs[r]) != in_units * n:
                    raise DslError(f"rank {r}: input of {len(inputs[r])} elements, the plan needs {in_units * n}")
                if plan["inplace"]:
                    one = [None] * (max(in_units, out_units) * n)
                    offset = 0 if in_units >= out_units else r * in_units * n
                    one[offset:offset + in_units * n] = list(inputs[r])
                    per_rank.append({"input": one, "output": one})
                else:
                    per_rank.append({"input": list(inputs[r]), "output": [None] * (out_units * n)})
            self.bufs.append(per_rank)
        self.signals = defaultdict(int)  # (type, src, dst, index) -> signals so far
        self.waited = defaultdict(int)
        self.packets = set()  # (call, rank, scratch slot) arrived
        self.barriers = defaultdict(int)  # (call, rank, members, nth) -> arrivals
        self.barrier_seen = defaultdict(int)  # (call, rank, tb, members) -> barriers passed
        self.arrived = set()  # (call, rank, tb, barrier key) that arrived at that barrier
        self.call = 0  # the call of the op being stepped

    def channel(self, r: int, op: dict) -> dict:
        return op["_channel"] if "_channel" in op else self.plan["ranks"][r]["channels"][op["channel"]]

    def view(self, r: int, ref: dict, count: int) -> Tuple[list, int]:
        start, _ = self.geo.range(ref)
        if ref["buffer"] == "scratch":
            return self.scratch[self.call % len(self.scratch)][r], start
        return self.bufs[self.call][r][ref["buffer"]], start

    def move(self, dst_rank: int, dst: dict, src_rank: int, src: dict) -> None:
        count = self.geo.count([dst, src])
        d, ds = self.view(dst_rank, dst, count)
        s, ss = self.view(src_rank, src, count)
        d[ds:ds + count] = s[ss:ss + count]

    def combine(self, r: int, dst: dict, srcs: List[dict]) -> None:
        count = self.geo.count([dst] + srcs)
        views = [self.view(r, s, count) for s in srcs]
        out = []
        for i in range(count):
            vals = [buf[start + i] for buf, start in views]
            acc = vals[0]
            for v in vals[1:]:
                acc = self.reduce(acc, v) if None not in (acc, v) else None
            out.append(acc)
        d, ds = self.view(r, dst, count)
        d[ds:ds + count] = out

    def slots(self, ref: dict) -> range:
        return range(ref["index"], ref["index"] + ref["size"])

    def arrived_packets(self, r: int, ref: dict) -> bool:
        return all((self.call, r, s) in self.packets for s in self.slots(ref))

    def step(self, r: int, tb: int, op: dict) -> bool:
        """Runs op (of call self.call) if it can proceed now; False if it must wait."""
        kind = op["op"]
        if kind in ("copy", "unpack_packets"):
            if kind == "unpack_packets" and not self.arrived_packets(r, op["src"]):
                return False
            self.move(r, op["dst"], r, op["src"])
        elif kind == "reduce":
            self.combine(r, op["dst"], op["srcs"])
        elif kind == "reduce_packets":
            if not all(self.arrived_packets(r, ref) for ref in op["packets"]):
                return False
            self.combine(r, op["dst"], op["srcs"] + op["packets"])
        elif kind in ("put", "put_packets"):
            peer = self.channel(r, op)["peer"]
            self.move(peer, op["dst"], r, op["src"])
            if kind == "put_packets":
                self.packets.update((self.call, peer, s) for s in self.slots(op["dst"]))
        elif kind == "get":
            self.move(r, op["dst"], self.channel(r, op)["peer"], op["src"])
        elif kind in ("signal", "wait"):
            ch = self.channel(r, op)
            if kind == "signal":
                self.signals[(ch["type"], r, ch["peer"], ch["index"])] += 1
            else:
                key = (ch["type"], ch["peer"], r, ch["index"])
                if self.signals[key] <= self.waited[(key, r)]:
                    return False
                self.waited[(key, r)] += 1
        elif kind == "barrier":
            members = tuple(sorted(op["threadblocks"]))
            nth = self.barrier_seen[(self.call, r, tb, members)]
            key = (self.call, r, members, nth)
            if (self.call, r, tb, key) not in self.arrived:
                self.arrived.add((self.call, r, tb, key))
                self.barriers[key] += 1
            if self.barriers[key] < len(members):
                return False
            self.barrier_seen[(self.call, r, tb, members)] += 1
        return True  # flush: puts complete at once here

    def entry_barrier(self, r: int, puts_or_gets: bool) -> List[dict]:
        """The executor's prologue round for plans that put or get (plan_peer_buffers.cuh); none otherwise."""
        if not puts_or_gets:
            return []
        peers = [p for p in range(self.plan["num_ranks"]) if p != r]
        ch = [{"type": "memory", "peer": p, "index": 0} for p in peers]
        return [{"op": "signal", "_channel": c} for c in ch] + [{"op": "wait", "_channel": c} for c in ch]

    def run(self, rng: Optional[random.Random] = None) -> None:
        """Greedy (each task as far as it can, in order) without rng; one random runnable op at a time with it.
        Tasks: (call, rank, -1) the entry barrier, (call, rank, block) the blocks. A blocked op may be retried:
        step() changes nothing until it proceeds (a barrier records its arrival once)."""
        ranks = self.plan["ranks"]
        puts_or_gets = any(op["op"] in ("put", "get") for rank in ranks for tb in rank["threadblocks"]
                           for op in tb["ops"])
        ops = {}
        for c in range(len(self.bufs)):
            for r, rank in enumerate(ranks):
                ops[(c, r, -1)] = self.entry_barrier(r, puts_or_gets)
                for tb in rank["threadblocks"]:
                    ops[(c, r, tb["id"])] = tb["ops"]
        pcs = {k: 0 for k in ops}
        tasks_of = defaultdict(list)  # (call, rank) -> its tasks
        for k in ops:
            tasks_of[k[:2]].append(k)

        def done(k):
            return pcs[k] == len(ops[k])

        def may_start(k):
            c, r, tb = k
            if c > 0 and not all(done(j) for j in tasks_of[(c - 1, r)]):
                return False  # stream order: the rank's previous call has ended
            return tb < 0 or done((c, r, -1))

        while True:
            progressed = False
            live = [k for k in sorted(pcs) if not done(k) and may_start(k)]
            if rng is not None:
                rng.shuffle(live)
            for key in live:
                self.call = key[0]
                while not done(key) and self.step(key[1], key[2], ops[key][pcs[key]]):
                    pcs[key] += 1
                    progressed = True
                    if rng is not None:
                        break
                if rng is not None and progressed:
                    break
            if all(done(k) for k in pcs):
                return
            if not progressed:
                blocked = [f"call {c}, rank {r}, " + (f"tb {tb}" if tb >= 0 else "entry barrier") +
                           f", op {pcs[(c, r, tb)]} ({ops[(c, r, tb)][pcs[(c, r, tb)]]['op']})"
                           for c, r, tb in sorted(pcs) if not done((c, r, tb)) and may_start((c, r, tb))]
                raise DslError(f"plan {self.plan['name']}: stuck: " + "; ".join(blocked))


def run_plan(plan: dict, n: int, inputs: List[List[int]], op: str = "sum",
             seed: Optional[int] = None, line: int = 1) -> List[list]:
    """Every rank's output buffer after one call with n elements per unit (docs/dsl.md, chunk geometry); in place
    the one buffer (``output_view`` cuts the caller's output from it). ``seed``: a random interleaving;
    ``line``: a Simple plan's chunks rounded up to a multiple of it, as the executor rounds them."""
    return run_calls(plan, n, [inputs], op, seed, line)[0]


def run_calls(plan: dict, n: int, calls: List[List[List[int]]], op: str = "sum",
              seed: Optional[int] = None, line: int = 1) -> List[List[list]]:
    """Calls back to back (calls[c][r]: rank r's input of call c): every call's output buffers, per rank. Scratch
    and semaphores carry over, so a program that lets a peer overwrite scratch another rank still reads in the
    previous call shows it (under some seeds)."""
    m = _Machine(plan, n, calls, op, line)
    m.run(random.Random(seed) if seed is not None else None)
    return [[bufs["output"] for bufs in per_rank] for per_rank in m.bufs]


def output_view(plan: dict, n: int, rank: int, buffer: list) -> list:
    """The caller's output within rank `rank`'s output buffer: all of it out of place; in place, where the
    collective's output lies in the one buffer (reduce-scatter: element rank * n, as NCCL's recvbuff =
    sendbuff + rank * recvcount)."""
    in_units, out_units = units(plan["collective"], plan["num_ranks"])
    if not plan["inplace"] or in_units <= out_units:
        return buffer
    return buffer[rank * out_units * n:(rank + 1) * out_units * n]


def expected_outputs(collective: str, inputs: List[List[int]], n: int, op: str = "sum") -> List[list]:
    """The collective's definition on the host."""
    R, f = len(inputs), REDUCERS[op]

    def reduced(parts):
        acc = list(parts[0])
        for p in parts[1:]:
            acc = [f(a, b) for a, b in zip(acc, p)]
        return acc

    if collective == "allreduce":
        return [reduced(inputs) for _ in range(R)]
    if collective == "allgather":
        return [sum((list(x) for x in inputs), []) for _ in range(R)]
    if collective == "reduce_scatter":
        return [reduced([x[r * n:(r + 1) * n] for x in inputs]) for r in range(R)]
    if collective == "alltoall":
        return [sum((inputs[s][r * n:(r + 1) * n] for s in range(R)), []) for r in range(R)]
    raise DslError(f"no host definition of {collective}")
