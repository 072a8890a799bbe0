"""The GPU checks one rank runs (rank_worker.py scenarios gpu_collectives and gpu_single): every Comm collective
and every default algorithm through Algorithm.execute, on random small integers in float32 (sums are exact),
outputs poisoned first, results compared element by element with a host reference built from every rank's
(seeded) input."""

import random
import struct
from array import array
from pathlib import Path

import meshcomm
from meshcomm import Collective, DataType, ReduceOp

F32 = DataType.FLOAT32
COUNT = 1003  # elements per rank (odd: tails are partial packs)
POISON = -999.0


def data(rank, count, salt):
    rng = random.Random(f"{salt}-{rank}")
    return [float(rng.randint(-8, 8)) for _ in range(count)]


def upload(values):
    buf = meshcomm.GpuBuffer(4 * max(len(values), 1))
    buf.upload(array("f", values).tobytes())
    return buf


def poisoned(count):
    return upload([POISON] * count)


def read(buf, count):
    out = array("f")
    out.frombytes(buf.download(4 * count))
    return list(out)


def check(name, got, expected):
    assert len(got) == len(expected), f"{name}: {len(got)} elements, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            raise AssertionError(f"{name}: element {i} is {g}, expected {e}")


def column_sums(rows):
    return [float(sum(col)) for col in zip(*rows)]


def chunk(values, index, count):
    return values[index * count:(index + 1) * count]


def v_counts(a, b):
    """alltoallv elements rank a sends to rank b (every rank computes the whole matrix)."""
    return 100 * ((a + b) % 3) + 7


def prefix(counts):
    out, total = [], 0
    for c in counts:
        out.append(total)
        total += c
    return out


class Collectives:
    """The Comm methods, each checked against the host reference; `checked` lists what passed."""

    def __init__(self, comm, rank, n):
        self.comm, self.rank, self.n = comm, rank, n
        self.checked = []

    def ok(self, name):
        self.checked.append(name)

    def all_reduce(self):
        x = [data(p, COUNT, "ar") for p in range(self.n)]
        send, recv = upload(x[self.rank]), poisoned(COUNT)
        self.comm.all_reduce(send.ptr, recv.ptr, COUNT, F32)
        check("all_reduce sum", read(recv, COUNT), column_sums(x))
        self.comm.all_reduce(send.ptr, recv.ptr, COUNT, F32, meshcomm.ReduceOpSpec.pre_mul_sum(2.0))
        check("all_reduce premulsum", read(recv, COUNT), [2 * v for v in column_sums(x)])
        inplace = upload(x[self.rank])
        self.comm.all_reduce(inplace.ptr, inplace.ptr, COUNT, F32, ReduceOp.MAX)
        check("all_reduce max in place", read(inplace, COUNT), [max(col) for col in zip(*x)])
        self.ok("all_reduce")

    def all_gather(self):
        x = [data(p, COUNT, "ag") for p in range(self.n)]
        send, recv = upload(x[self.rank]), poisoned(self.n * COUNT)
        self.comm.all_gather(send.ptr, recv.ptr, COUNT, F32)
        check("all_gather", read(recv, self.n * COUNT), sum(x, []))
        self.ok("all_gather")

    def reduce_scatter(self):
        z = [data(p, self.n * COUNT, "rs") for p in range(self.n)]
        send, recv = upload(z[self.rank]), poisoned(COUNT)
        self.comm.reduce_scatter(send.ptr, recv.ptr, COUNT, F32)
        check("reduce_scatter", read(recv, COUNT), column_sums([chunk(row, self.rank, COUNT) for row in z]))
        self.ok("reduce_scatter")

    def rooted(self):
        x = [data(p, COUNT, "root") for p in range(self.n)]
        z = [data(p, self.n * COUNT, "scatter") for p in range(self.n)]
        last = self.n - 1
        send, recv = upload(x[self.rank]), poisoned(COUNT)
        self.comm.broadcast(send.ptr, recv.ptr, COUNT, F32, root=last)
        check("broadcast", read(recv, COUNT), x[last])
        recv = poisoned(COUNT)
        self.comm.reduce(send.ptr, recv.ptr, COUNT, F32, ReduceOp.SUM, root=0)
        if self.rank == 0:
            check("reduce", read(recv, COUNT), column_sums(x))
        gathered = poisoned(self.n * COUNT) if self.rank == 0 else None
        self.comm.gather(send.ptr, gathered.ptr if gathered else 0, COUNT, F32, root=0)
        if self.rank == 0:
            check("gather", read(gathered, self.n * COUNT), sum(x, []))
        source = upload(z[last]) if self.rank == last else None
        recv = poisoned(COUNT)
        self.comm.scatter(source.ptr if source else 0, recv.ptr, COUNT, F32, root=last)
        check("scatter", read(recv, COUNT), chunk(z[last], self.rank, COUNT))
        self.ok("broadcast/reduce/gather/scatter")

    def all_to_all(self):
        z = [data(p, self.n * COUNT, "a2a") for p in range(self.n)]
        send, recv = upload(z[self.rank]), poisoned(self.n * COUNT)
        self.comm.all_to_all(send.ptr, recv.ptr, COUNT, F32)
        check("all_to_all", read(recv, self.n * COUNT), sum((chunk(z[p], self.rank, COUNT) for p in range(self.n)), []))
        self.ok("all_to_all")

    def all_to_allv_case(self):
        """(send buffer, send counts/displs, recv counts/displs, expected output) of this rank."""
        n, r = self.n, self.rank
        sends = {p: [v_counts(p, q) for q in range(n)] for p in range(n)}
        w = {p: data(p, sum(sends[p]), "a2av") for p in range(n)}
        recv_counts = [v_counts(p, r) for p in range(n)]
        expected = []
        for p in range(n):
            start = prefix(sends[p])[r]
            expected += w[p][start:start + v_counts(p, r)]
        return w[r], sends[r], prefix(sends[r]), recv_counts, prefix(recv_counts), expected

    def all_to_allv(self):
        values, sc, sd, rc, rd, expected = self.all_to_allv_case()
        send, recv = upload(values), poisoned(len(expected))
        self.comm.all_to_allv(send.ptr, sc, sd, recv.ptr, rc, rd, F32)
        check("all_to_allv host counts", read(recv, len(expected)), expected)
        counts = [upload_u64(a) for a in (sc, sd, rc, rd)]
        recv = poisoned(len(expected))
        self.comm.all_to_allv_device(send.ptr, counts[0].ptr, counts[1].ptr, recv.ptr, counts[2].ptr, counts[3].ptr, F32)
        check("all_to_allv device counts", read(recv, len(expected)), expected)
        self.ok("all_to_allv")

    def send_recv_ring(self):
        x = [data(p, COUNT, "p2p") for p in range(self.n)]
        send, recv = upload(x[self.rank]), poisoned(COUNT)
        self.comm.group_start()
        self.comm.send(send.ptr, COUNT, F32, (self.rank + 1) % self.n)
        self.comm.recv(recv.ptr, COUNT, F32, (self.rank - 1) % self.n)
        self.comm.group_end()
        check("send/recv ring", read(recv, COUNT), x[(self.rank - 1) % self.n])
        self.comm.barrier()
        self.ok("send/recv/barrier")


def upload_u64(values):
    buf = meshcomm.GpuBuffer(8 * len(values))
    buf.upload(array("Q", values).tobytes())
    return buf


class Executions:
    """Algorithm.execute with every default algorithm (descriptors from build_default_algorithms())."""

    def __init__(self, comm, rank, n, collectives):
        self.comm, self.rank, self.n, self.c = comm, rank, n, collectives
        self.executed, self.declined = [], []

    def run(self, algorithm):
        case = getattr(self, "case_" + meshcomm.collective_name(algorithm.collective))
        try:
            case(algorithm)
            self.executed.append(algorithm.name)
        except meshcomm.InvalidUsageError as e:
            if "cannot run this call" not in str(e):
                raise
            self.declined.append([algorithm.name, str(e)])

    def simple(self, algorithm, send_values, out_count, extras=None):
        send, recv = upload(send_values), poisoned(out_count)
        algorithm.execute(self.comm, send.ptr, recv.ptr, 4 * len(send_values), 4 * out_count, F32, extras=extras)
        return read(recv, out_count)

    def case_allreduce(self, a):
        x = [data(p, COUNT, a.name) for p in range(self.n)]
        check(a.name, self.simple(a, x[self.rank], COUNT), column_sums(x))

    def case_reduce(self, a):
        x = [data(p, COUNT, a.name) for p in range(self.n)]
        got = self.simple(a, x[self.rank], COUNT, extras={"root": 0})
        if self.rank == 0:
            check(a.name, got, column_sums(x))

    def case_broadcast(self, a):
        x = [data(p, COUNT, a.name) for p in range(self.n)]
        check(a.name, self.simple(a, x[self.rank], COUNT, extras={"root": self.n - 1}), x[self.n - 1])

    def case_allgather(self, a):
        x = [data(p, COUNT, a.name) for p in range(self.n)]
        check(a.name, self.simple(a, x[self.rank], self.n * COUNT), sum(x, []))

    def case_gather(self, a):
        x = [data(p, COUNT, a.name) for p in range(self.n)]
        got = self.simple(a, x[self.rank], self.n * COUNT, extras={"root": 0})
        if self.rank == 0:
            check(a.name, got, sum(x, []))

    def case_reduce_scatter(self, a):
        z = [data(p, self.n * COUNT, a.name) for p in range(self.n)]
        check(a.name, self.simple(a, z[self.rank], COUNT), column_sums([chunk(row, self.rank, COUNT) for row in z]))

    def case_scatter(self, a):
        last = self.n - 1
        z = [data(p, self.n * COUNT, a.name) for p in range(self.n)]
        check(a.name, self.simple(a, z[self.rank], COUNT, extras={"root": last}), chunk(z[last], self.rank, COUNT))

    def case_alltoall(self, a):
        z = [data(p, self.n * COUNT, a.name) for p in range(self.n)]
        expected = sum((chunk(z[p], self.rank, COUNT) for p in range(self.n)), [])
        check(a.name, self.simple(a, z[self.rank], self.n * COUNT), expected)

    def case_alltoallv(self, a):
        values, sc, sd, rc, rd, expected = self.c.all_to_allv_case()
        arrays = [upload_u64(v) for v in (sc, sd, rc, rd)]
        extras = dict(zip(("send_counts", "send_displs", "recv_counts", "recv_displs"), (b.ptr for b in arrays)))
        send, recv = upload(values), poisoned(len(expected))
        a.execute(self.comm, send.ptr, recv.ptr, 4 * len(values), 4 * len(expected), F32, extras=extras)
        check(a.name, read(recv, len(expected)), expected)

    def case_sendrecv(self, a):
        try:
            a.execute(self.comm, 0, 0, 0, 0, F32)
        except meshcomm.InvalidUsageError as e:
            assert "sendrecv runs through Comm.send/recv" in str(e), str(e)
            return
        raise AssertionError("execute of a sendrecv algorithm did not raise")

    def case_barrier(self, a):
        a.execute(self.comm, 0, 0, 0, 0, F32)

    def errors(self):
        rsag = meshcomm.build_default_algorithms()["allreduce_rsag"]
        x = [data(p, COUNT, "cfg") for p in range(self.n)]
        send, recv = upload(x[self.rank]), poisoned(COUNT)
        rsag.execute(self.comm, send.ptr, recv.ptr, 4 * COUNT, 4 * COUNT, F32, nblocks=1, nthreads_per_block=256)
        check("allreduce_rsag nblocks=1", read(recv, COUNT), column_sums(x))
        expect_error(lambda: rsag.execute(self.comm, send.ptr, recv.ptr, 4 * COUNT, 4 * COUNT, F32, executor=object()),
                     "executor: the JSON-plan executor is not built yet")
        expect_error(lambda: rsag.execute(self.comm, send.ptr, recv.ptr, 4 * COUNT, 4 * COUNT, F32, extras={"bogus": 1}),
                     f"rank {self.rank}: allreduce: execute: extras: 'bogus' does not apply")
        expect_error(lambda: rsag.execute(self.comm, send.ptr, recv.ptr, 4 * COUNT, 4 * COUNT, F32, nblocks=-1),
                     "nblocks/nthreads_per_block must be >= 0")
        expect_error(lambda: self.comm.all_reduce(0, recv.ptr, COUNT, F32), f"rank {self.rank}: allreduce")


def expect_error(call, text, kind=meshcomm.InvalidUsageError):
    try:
        call()
    except kind as e:
        assert text in str(e), f"error text {str(e)!r} does not contain {text!r}"
        return
    raise AssertionError(f"no {kind.__name__} raised (expected one containing {text!r})")


def run_all(rank, n):
    comm = meshcomm.Comm.from_env()
    assert (comm.rank, comm.size, comm.cuda_device) == (rank, n, rank)
    c = Collectives(comm, rank, n)
    for step in (c.all_reduce, c.all_gather, c.reduce_scatter, c.rooted, c.all_to_all, c.all_to_allv, c.send_recv_ring):
        step()
    e = Executions(comm, rank, n, c)
    for algorithm in meshcomm.build_default_algorithms():
        e.run(algorithm)
    e.errors()
    comm.check_error()
    names = {a.name for a in comm.algorithms}
    comm.close()
    expect_error(lambda: comm.rank, "used after close()")
    return {"checked": c.checked, "executed": e.executed, "declined": e.declined, "comm_algorithms": sorted(names)}


def run_single():
    """One rank: a Comm over a one-rank bootstrap, GpuBuffer round trip, allreduce (a copy) in and out of place."""
    uid = meshcomm.TcpBootstrap.create_unique_id(1)
    with meshcomm.Comm(meshcomm.TcpBootstrap(0, 1, uid)) as comm:
        x = data(0, COUNT, "single")
        send, recv = upload(x), poisoned(COUNT)
        check("GpuBuffer round trip", read(send, COUNT), x)
        comm.all_reduce(send.ptr, recv.ptr, COUNT, F32)
        check("1-rank all_reduce", read(recv, COUNT), x)
        a = comm.algorithms["allreduce_rsag"]
        a.execute(comm, send.ptr, send.ptr, 4 * COUNT, 4 * COUNT, F32)
        check("1-rank execute in place", read(send, COUNT), x)
    assert comm.closed
    return {"ok": True}


def run_dlpack():
    """GpuBuffer as a DLPack producer: torch sees the same bytes (no copy), writes through it land in the buffer,
    the view keeps the buffer alive after the GpuBuffer object is gone. Without torch: {"skipped": reason}."""
    try:
        import torch
    except ImportError as e:
        return {"skipped": f"torch not importable ({e})"}
    payload = bytes(random.Random("dlpack").randrange(256) for _ in range(1000))
    buf = meshcomm.GpuBuffer(len(payload))
    buf.upload(payload)
    assert buf.__dlpack_device__() == (2, buf.device), buf.__dlpack_device__()  # kDLCUDA
    t = torch.from_dlpack(buf)
    assert t.dtype == torch.uint8 and t.shape == (len(payload),), (t.dtype, t.shape)
    assert t.device == torch.device("cuda", buf.device), t.device
    assert t.data_ptr() == buf.ptr, "DLPack view is a copy"
    assert bytes(t.cpu().tolist()) == payload, "torch reads other bytes than uploaded"
    t[::3] = 7  # written through torch, read back through the buffer
    torch.cuda.synchronize()
    expected = bytes(7 if i % 3 == 0 else b for i, b in enumerate(payload))
    assert buf.download() == expected, "a write through the DLPack view did not reach the buffer"
    words = torch.from_dlpack(buf.as_dlpack()).view(torch.int32)  # reinterpret: 250 int32
    assert words.numel() == len(payload) // 4
    del buf  # the views own it now
    total = int(t.to(torch.int64).sum().item())
    assert total == sum(expected), (total, sum(expected))
    return {"ok": True}


NATIVE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch" / "native_allreduce.cu"


def encode(values, dtype):
    """Host floats as the bytes of `dtype` (f32, f16, bf16; round to nearest even)."""
    if dtype == DataType.FLOAT32:
        return array("f", values).tobytes()
    if dtype == DataType.FLOAT16:
        return struct.pack(f"<{len(values)}e", *values)
    words = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    return struct.pack(f"<{len(values)}H", *(((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words))


def decode(raw, dtype):
    n = len(raw) // meshcomm.data_type_size(dtype)
    if dtype == DataType.FLOAT32:
        return list(struct.unpack(f"<{n}f", raw))
    if dtype == DataType.FLOAT16:
        return list(struct.unpack(f"<{n}e", raw))
    return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *(h << 16 for h in struct.unpack(f"<{n}H", raw)))))


def reference(rows, op, n):
    """What every rank must get: the inputs reduced in rank order (exact on these small integers)."""
    if op == ReduceOp.MAX:
        return [float(max(c)) for c in zip(*rows)]
    if op == ReduceOp.MIN:
        return [float(min(c)) for c in zip(*rows)]
    if op == ReduceOp.AVG:
        return [float(sum(c)) / n for c in zip(*rows)]
    if op == ReduceOp.PROD:
        out = []
        for c in zip(*rows):
            p = 1.0
            for x in c:
                p *= x
            out.append(p)
        return out
    return column_sums(rows)


def run_native(rank, n, cache_dir):
    """A user's algorithm (examples/torch/native_allreduce.cu) built by compile_native and run through
    Algorithm.execute: registration rules, every dtype and op it supports, in and out of place, counts with
    partial blocks, and its errors."""
    comm = meshcomm.Comm.from_env()
    name = "user_oneshot_allreduce"
    alg = meshcomm.compile_native(name, NATIVE_EXAMPLE, cache_dir=cache_dir)
    probe, out = upload(data(rank, 8, "probe")), poisoned(8)
    expect_error(lambda: alg.execute(comm, probe.ptr, out.ptr, 32, 32, F32),
                 f"rank {rank}: allreduce: execute: native algorithm '{name}' is not registered on this Comm")
    expect_error(lambda: comm.add_algorithm(comm.algorithms["allreduce_rsag"]), "is not a native algorithm")
    comm.add_algorithm(alg)
    assert name in comm.algorithms and comm.algorithms[name].collective == Collective.ALLREDUCE
    expect_error(lambda: comm.add_algorithm(alg), f"'{name}' is already registered")

    cases = [(dt, op, 1023) for dt in (F32, DataType.FLOAT16, DataType.BFLOAT16)
             for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.AVG)]
    cases += [(F32, ReduceOp.PROD, 1023), (F32, ReduceOp.SUM, 1), (F32, ReduceOp.SUM, 3), (F32, ReduceOp.SUM, 70001)]
    checked = 0
    for dt, op, count in cases:
        size = count * meshcomm.data_type_size(dt)
        for in_place in (False, True):
            salt = f"native-{dt}-{op}-{count}-{in_place}"
            rows = [data(r, count, salt) for r in range(n)]
            if op == ReduceOp.PROD:  # keep products of n values exact in float32
                rows = [[float((int(x) % 3) - 1 or 2) for x in row] for row in rows]
            send = meshcomm.GpuBuffer(size)
            send.upload(encode(rows[rank], dt))
            recv = send if in_place else meshcomm.GpuBuffer(size)
            if not in_place:
                recv.upload(encode([POISON] * count, dt))
            alg.execute(comm, send.ptr, recv.ptr, size, size, dt, op=op)
            got = decode(recv.download(size), dt)
            check(f"{name} {meshcomm.data_type_name(dt)} {op} count={count} in_place={in_place}", got,
                  decode(encode(reference(rows, op, n), dt), dt))
            checked += 1
    # premulsum with a host scalar: every rank's input scaled by 0.5, then summed
    rows = [data(r, 1023, "native-premul") for r in range(n)]
    send, recv = upload(rows[rank]), poisoned(1023)
    alg.execute(comm, send.ptr, recv.ptr, 4 * 1023, 4 * 1023, F32, op=meshcomm.ReduceOpSpec.pre_mul_sum(0.5))
    check(f"{name} premulsum 0.5", read(recv, 1023), [s * 0.5 for s in column_sums(rows)])
    checked += 1

    i32 = meshcomm.GpuBuffer(4 * 16)
    expect_error(lambda: alg.execute(comm, i32.ptr, i32.ptr, 64, 64, DataType.INT32),
                 f"rank {rank}: allreduce: algorithm {name} cannot run this call: dtype int32 (f32, f16, bf16 only)")
    expect_error(lambda: alg.execute(comm, send.ptr, recv.ptr, 4 * 1023, 4 * 1023, F32, nblocks=100000),
                 f"rank {rank}: allreduce: nblocks: 100000")
    comm.check_error()
    comm.close()
    return {"checked": checked}
