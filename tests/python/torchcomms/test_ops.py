"""Every torchcomms op on meshcomm, sync and async, against torchcomms' NCCL backend in the same process and a
host reference: seeded integer-valued inputs (exact in every dtype), poisoned outputs, odd and empty counts.

Run: PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torchcomms
"""

import pytest
from references import reference_reduce  # tests/python/torch (conftest puts it on sys.path)

SIZES = [0, 1, 1031, 65539]
FLOAT_DTYPES = ["float32", "float16", "bfloat16", "float64"]
INT_DTYPES = ["int32", "int8"]
ASYNC = [False, True]


def dtype_of(comms, name):
    return getattr(comms.torch, name)


def finish(work, async_op):
    """As a caller waits: an async op's work.wait() orders the current stream; then read on the host."""
    import torch

    assert work is not None
    if async_op:
        work.wait()
    torch.cuda.synchronize()


def same(got, expected, what):
    got = got.cpu()
    expected = expected.cpu().to(got.dtype)
    assert got.shape == expected.shape, f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    assert bool((got == expected).all()), (
        f"{what}: got {got.flatten()[:8].tolist()}..., expected {expected.flatten()[:8].tolist()}...")


def both(comms, run):
    """Runs `run(comm)` on meshcomm and on NCCL; returns their results (run returns host tensors)."""
    return run(comms.mesh), run(comms.nccl)


def check(comms, run, expected, what):
    mesh, nccl = both(comms, run)
    for i, (m, n, e) in enumerate(zip(mesh, nccl, expected)):
        same(m, e, f"meshcomm {what} [{i}]")
        same(n, m, f"meshcomm vs NCCL {what} [{i}]")


def reduce_op(comms, op):
    return getattr(comms.torchcomms.ReduceOp, op)


# ---- all_reduce --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("op", ["SUM", "MAX", "MIN", "PRODUCT", "AVG"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
@pytest.mark.parametrize("count", SIZES)
def test_all_reduce(comms, count, dtype, op, async_op):
    torch = comms.torch
    t = dtype_of(comms, dtype)
    if op == "AVG" and not t.is_floating_point:
        pytest.skip("integer AVG: torchcomms' NCCL backend truncates; checked in test_integer_avg_truncates")
    low, high = (-1, 3) if op == "PRODUCT" else (-4, 5)
    salt = f"ar/{count}/{dtype}/{op}"
    inputs = [comms.seeded(r, count, t, salt, low, high) for r in range(comms.size)]
    expected = reference_reduce(torch, torch.stack([x.double() for x in inputs]), op).to(t)

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        finish(comm.all_reduce(x, reduce_op(comms, op), async_op), async_op)
        return [x]

    check(comms, run, [expected], f"all_reduce {op} {dtype} x{count}")


def test_integer_avg_truncates(comms):
    torch = comms.torch
    inputs = [comms.seeded(r, 1031, torch.int32, "avg-int") for r in range(comms.size)]
    summed = torch.stack(inputs).sum(0)
    expected = torch.div(summed, comms.size, rounding_mode="trunc").to(torch.int32)

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        finish(comm.all_reduce(x, comms.torchcomms.ReduceOp.AVG, False), False)
        return [x]

    check(comms, run, [expected], "all_reduce AVG int32")


@pytest.mark.parametrize("factor_kind", ["double", "tensor"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_all_reduce_premul_sum(comms, dtype, factor_kind):
    torch = comms.torch
    t = dtype_of(comms, dtype)
    inputs = [comms.seeded(r, 4099, t, f"premul/{dtype}") for r in range(comms.size)]
    factor = 2.0 if factor_kind == "double" else torch.tensor([2.0], dtype=t, device=comms.device)
    expected = (torch.stack([x.double() for x in inputs]) * 2.0).sum(0).to(t)

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        finish(comm.all_reduce(x, comms.torchcomms.ReduceOp.PREMUL_SUM(factor), False), False)
        return [x]

    if t == torch.bfloat16 and factor_kind == "double":
        # torchcomms 0.2's NCCL backend refuses a double factor for bf16 ("PreMulSum factor type must match
        # input data type"); meshcomm takes it: checked against the reference alone.
        same(run(comms.mesh)[0], expected, "meshcomm all_reduce PREMUL_SUM(double) bfloat16")
        return
    check(comms, run, [expected], f"all_reduce PREMUL_SUM({factor_kind}) {dtype}")


def test_async_inputs_may_be_dropped_after_enqueue(comms):
    """The caller may drop its tensors right after an async op (torchcomms' AllReduceTest): their memory must
    not be handed out again while the op can still write it."""
    torch = comms.torch
    n = 1 << 22
    for _ in range(4):
        x = comms.gpu(comms.seeded(comms.rank, n, torch.float32, "drop"))
        work = comms.mesh.all_reduce(x, comms.torchcomms.ReduceOp.SUM, True)
        del x
        filler = torch.full((n,), -9.0, device=comms.device)  # may reuse the block only after the op
        work.wait()
        torch.cuda.synchronize()
        same(filler, torch.full((n,), -9.0), "a tensor allocated after the input was dropped")


# ---- broadcast, reduce -------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("count", SIZES)
def test_broadcast_and_reduce(comms, count, async_op):
    torch = comms.torch
    root = comms.size - 1
    inputs = [comms.seeded(r, count, torch.bfloat16, f"bc/{count}") for r in range(comms.size)]

    def run(comm):
        b = comms.gpu(inputs[comms.rank])
        finish(comm.broadcast(b, root, async_op), async_op)
        r = comms.gpu(inputs[comms.rank])
        finish(comm.reduce(r, root, comms.torchcomms.ReduceOp.SUM, async_op), async_op)
        return [b, r]

    reduced = torch.stack([x.double() for x in inputs]).sum(0).to(torch.bfloat16)
    mesh, nccl = both(comms, run)
    same(mesh[0], inputs[root], "broadcast")
    same(nccl[0], mesh[0], "meshcomm vs NCCL broadcast")
    if comms.rank == root:
        same(mesh[1], reduced, "reduce on the root")
        same(nccl[1], mesh[1], "meshcomm vs NCCL reduce")


# ---- gathers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("count", SIZES)
def test_all_gather_forms(comms, count, async_op):
    torch = comms.torch
    t = torch.float16
    inputs = [comms.seeded(r, count, t, f"ag/{count}") for r in range(comms.size)]

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        separate = [comms.poison(count, t) for _ in range(comms.size)]
        finish(comm.all_gather(separate, x, async_op), async_op)
        single = comms.poison(count * comms.size, t)
        finish(comm.all_gather_single(single, x, async_op), async_op)
        return separate + [single]

    check(comms, run, inputs + [torch.cat(inputs)], f"all_gather x{count}")


@pytest.mark.parametrize("async_op", ASYNC)
def test_all_gather_v(comms, async_op):
    torch = comms.torch
    counts = [1 + 997 * r for r in range(comms.size)]  # every rank a different size
    inputs = [comms.seeded(r, counts[r], torch.int32, "agv") for r in range(comms.size)]

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        outs = [comms.poison(counts[r], torch.int32) for r in range(comms.size)]
        finish(comm.all_gather_v(outs, x, async_op), async_op)
        return outs

    check(comms, run, inputs, "all_gather_v")


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("count", [1, 4099])
def test_gather_and_scatter(comms, count, async_op):
    torch = comms.torch
    root = 1 % comms.size
    inputs = [comms.seeded(r, count, torch.float32, f"gs/{count}") for r in range(comms.size)]
    chunks = [comms.seeded(root, count, torch.float32, f"scatter/{count}/{p}") for p in range(comms.size)]

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        gathered = [comms.poison(count, torch.float32) for _ in range(comms.size)] if comms.rank == root else []
        finish(comm.gather(gathered, x, root, async_op), async_op)
        out = comms.poison(count, torch.float32)
        ins = [comms.gpu(c) for c in chunks] if comms.rank == root else []
        finish(comm.scatter(out, ins, root, async_op), async_op)
        return gathered + [out]

    expected = (inputs if comms.rank == root else []) + [chunks[comms.rank]]
    check(comms, run, expected, f"gather/scatter x{count}")


# ---- reduce_scatter ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("op", ["SUM", "MAX", "AVG"])
@pytest.mark.parametrize("count", SIZES)
def test_reduce_scatter_forms(comms, count, op, async_op):
    torch = comms.torch
    t = torch.float32
    n = comms.size
    inputs = [comms.seeded(r, count * n, t, f"rs/{count}/{op}") for r in range(n)]
    full = reference_reduce(torch, torch.stack([x.double() for x in inputs]), op).to(t)
    mine = full[comms.rank * count:(comms.rank + 1) * count]

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        single = comms.poison(count, t)
        finish(comm.reduce_scatter_single(single, x, reduce_op(comms, op), async_op), async_op)
        listed = comms.poison(count, t)
        parts = [p.clone() for p in x.chunk(n)] if count else [comms.gpu(torch.empty(0, dtype=t))] * n
        finish(comm.reduce_scatter(listed, parts, reduce_op(comms, op), async_op), async_op)
        return [single, listed]

    check(comms, run, [mine, mine], f"reduce_scatter {op} x{count}")


@pytest.mark.parametrize("async_op", ASYNC)
def test_reduce_scatter_v(comms, async_op):
    torch = comms.torch
    n = comms.size
    counts = [3 + 1021 * p for p in range(n)]
    inputs = [[comms.seeded(r, counts[p], torch.float32, f"rsv/{p}") for p in range(n)] for r in range(n)]
    expected = torch.stack([inputs[r][comms.rank] for r in range(n)]).sum(0)

    def run(comm):
        parts = [comms.gpu(x) for x in inputs[comms.rank]]
        out = comms.poison(counts[comms.rank], torch.float32)
        finish(comm.reduce_scatter_v(out, parts, comms.torchcomms.ReduceOp.SUM, async_op), async_op)
        return [out]

    check(comms, run, [expected], "reduce_scatter_v")


# ---- all-to-all --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("count", [0, 1, 1031])
def test_all_to_all_forms(comms, count, async_op):
    torch = comms.torch
    n = comms.size
    t = torch.int8
    inputs = [comms.seeded(r, count * n, t, f"a2a/{count}") for r in range(n)]
    expected = torch.cat([inputs[r][comms.rank * count:(comms.rank + 1) * count] for r in range(n)])

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        single = comms.poison(count * n, t)
        finish(comm.all_to_all_single(single, x, async_op), async_op)
        outs = [comms.poison(count, t) for _ in range(n)]
        finish(comm.all_to_all(outs, [p.clone() for p in x.chunk(n)] if count else
                               [comms.gpu(torch.empty(0, dtype=t))] * n, async_op), async_op)
        return [single, torch.cat(outs) if count else single]

    check(comms, run, [expected, expected], f"all_to_all x{count}")


@pytest.mark.parametrize("async_op", ASYNC)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_all_to_all_v_single(comms, dtype, async_op):
    torch = comms.torch
    t = getattr(torch, dtype)
    n = comms.size
    hidden = 7
    rows = [[(3 * r + 5 * p) % 11 for p in range(n)] for r in range(n)]  # rows[r][p]: r sends p (0s included)
    inputs = [comms.seeded(r, (sum(rows[r]), hidden), t, "a2av") for r in range(n)]

    def part(r, p):
        start = sum(rows[r][:p])
        return inputs[r][start:start + rows[r][p]]

    expected = torch.cat([part(r, comms.rank) for r in range(n)])

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        recv_rows = [rows[r][comms.rank] for r in range(n)]
        out = comms.poison((sum(recv_rows), hidden), t)
        finish(comm.all_to_all_v_single(out, x, recv_rows, rows[comms.rank], async_op), async_op)
        return [out]

    if t == torch.bfloat16:
        # torchcomms 0.2's NCCL backend returned other rows than the host reference for bf16, even with equal
        # splits (4x H100; its byte offsets use wordSize(), whose bf16 case depends on a build macro): meshcomm
        # is checked against the reference alone.
        same(run(comms.mesh)[0], expected, "meshcomm all_to_all_v_single bf16")
        return
    check(comms, run, [expected], "all_to_all_v_single")


# ---- point to point, barrier -------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", ASYNC)
def test_batch_ring_exchange(comms, async_op):
    """Every rank sends to the next and receives from the previous in one batch: no deadlock."""
    torch = comms.torch
    n = comms.size
    count = 1 << 20
    inputs = [comms.seeded(r, count, torch.float32, "ring") for r in range(n)]

    def run(comm):
        batch = comm.batch_op_create()
        x = comms.gpu(inputs[comms.rank])
        out = comms.poison(count, torch.float32)
        batch.send(x, (comms.rank + 1) % n)
        batch.recv(out, (comms.rank - 1) % n)
        finish(batch.issue(async_op), async_op)
        return [out]

    check(comms, run, [inputs[(comms.rank - 1) % comms.size]], "batch ring exchange")


def test_send_recv_pairs(comms):
    torch = comms.torch
    if comms.size % 2:
        pytest.skip("needs an even number of ranks")
    peer = comms.rank ^ 1
    inputs = [comms.seeded(r, 4097, torch.float64, "p2p") for r in range(comms.size)]

    def run(comm):
        x = comms.gpu(inputs[comms.rank])
        out = comms.poison(4097, torch.float64)
        if comms.rank % 2 == 0:
            finish(comm.send(x, peer, True), True)
            finish(comm.recv(out, peer, True), True)
        else:
            finish(comm.recv(out, peer, True), True)
            finish(comm.send(x, peer, True), True)
        return [out]

    check(comms, run, [inputs[peer]], "send/recv")


def test_barrier_and_work_status(comms):
    torch = comms.torch
    work = comms.mesh.barrier(True)
    work.wait_blocking()
    assert work.is_completed()
    x = comms.gpu(torch.ones(1 << 16))
    work = comms.mesh.all_reduce(x, comms.torchcomms.ReduceOp.SUM, True)
    work.wait_blocking()
    assert work.is_completed()
    same(x, torch.full((1 << 16,), float(comms.size)), "all_reduce after wait_blocking")


# ---- bad arguments -----------------------------------------------------------------------------------------


def test_bad_arguments_name_rank_op_and_argument(comms):
    torch = comms.torch
    rank = comms.rank
    mesh = comms.mesh
    cases = [
        (lambda: mesh.all_reduce(torch.ones(4), comms.torchcomms.ReduceOp.SUM, False),
         f"meshcomm: rank {rank}: all_reduce: tensor: a cpu tensor"),
        (lambda: mesh.all_reduce(comms.gpu(torch.ones(4, 4)).t(), comms.torchcomms.ReduceOp.SUM, False),
         f"meshcomm: rank {rank}: all_reduce: tensor: tensor is not contiguous"),
        (lambda: mesh.all_reduce(comms.gpu(torch.ones(4)), comms.torchcomms.ReduceOp.BAND, False),
         f"meshcomm: rank {rank}: all_reduce: op: bitwise reductions"),

        (lambda: mesh.all_gather_single(comms.gpu(torch.ones(3)), comms.gpu(torch.ones(4)), False),
         f"meshcomm: rank {rank}: all_gather_single: output: 3 elements, expected {4 * comms.size}"),
        (lambda: mesh.all_to_all_v_single(comms.gpu(torch.ones(4)), comms.gpu(torch.ones(4)), [1] * comms.size,
                                          [5] * comms.size, False),
         f"meshcomm: rank {rank}: all_to_all_v_single: input_split_sizes:"),

        (lambda: mesh.all_reduce(comms.gpu(torch.ones(4)), comms.torchcomms.ReduceOp.SUM, False,
                                 hints={"meshcomm::channels": "8"}),
         f"meshcomm: rank {rank}: all_reduce: unknown hint 'meshcomm::channels'"),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError) as info:
            call()
        assert message in str(info.value), str(info.value)
    # torchcomms' front end checks roots and peers itself, before the backend sees them.
    for call in (lambda: mesh.broadcast(comms.gpu(torch.ones(4)), comms.size, False),
                 lambda: mesh.send(comms.gpu(torch.ones(4)), -1, False)):
        with pytest.raises(RuntimeError, match="range"):
            call()
    # The communicator is still in step on every rank.
    x = comms.gpu(torch.ones(8))
    finish(mesh.all_reduce(x, comms.torchcomms.ReduceOp.SUM, False), False)
    same(x, torch.full((8,), float(comms.size)), "all_reduce after the rejected calls")
