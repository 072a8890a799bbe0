"""The c10d backend "meshcomm" under torchrun (docs/torch.md): every op on random data against a host
reference built from all ranks' seeded inputs, sync and async, CUDA-graph capture, subgroups, errors.

Run (one process per GPU): PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torch
"""

import zlib
from datetime import timedelta

import pytest
from references import reference_reduce

SIZES = [1, 1031, 65539]  # odd counts: partial packs and tails


def seeded(world, rank, shape, dtype, salt, low=-4, high=5):
    """Rank `rank`'s input of a test: small integers, exact in every dtype (sums of a few ranks included)."""
    torch = world.torch
    g = torch.Generator().manual_seed(zlib.crc32(f"{salt}/{rank}".encode()))
    if dtype in (torch.uint8, torch.bool) or not dtype.is_signed:
        low = 0
    values = torch.randint(low, high, shape if isinstance(shape, tuple) else (shape,), generator=g)
    return values.to(dtype)


def on_gpu(world, t):
    return t.to(world.device)


def finish(work, async_op):
    """Waits like a caller would: an async op's work.wait() orders the current stream; then read on the host."""
    import torch

    if async_op:
        assert work is not None
        work.wait()
    torch.cuda.synchronize()


def assert_equal(got, expected, what, tolerance=0.0):
    got = got.cpu()
    expected = expected.to(got.dtype) if got.dtype != expected.dtype else expected
    if tolerance:
        ok = (got.double() - expected.double()).abs().max().item() <= tolerance if got.numel() else True
    else:
        ok = bool((got == expected).all()) if got.numel() else True
    assert ok, f"{what}: got {got.flatten()[:8].tolist()}..., expected {expected.flatten()[:8].tolist()}..."


# ---- allreduce -------------------------------------------------------------------------------------------

DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8"]
OPS = ["SUM", "MAX", "MIN", "PRODUCT"]


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce(world, dtype, op, async_op):
    torch, dist = world.torch, world.dist
    dt = getattr(torch, dtype)
    n = 1031
    salt = f"allreduce/{dtype}/{op}"
    low, high = (1, 3) if op == "PRODUCT" else (-4, 5)
    inputs = [seeded(world, r, n, dt, salt, low, high) for r in range(world.size)]
    x = on_gpu(world, inputs[world.rank])
    work = dist.all_reduce(x, op=getattr(dist.ReduceOp, op), async_op=async_op)
    finish(work, async_op)
    expected = reference_reduce(torch, torch.stack([i.double() for i in inputs]), op)
    assert_equal(x, expected, f"allreduce {dtype} {op}")


@pytest.mark.parametrize("n", SIZES)
def test_allreduce_sizes_and_avg(world, n):
    torch, dist = world.torch, world.dist
    inputs = [seeded(world, r, n, torch.float32, f"avg/{n}") for r in range(world.size)]
    x = on_gpu(world, inputs[world.rank])
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    torch.cuda.synchronize()
    assert_equal(x, torch.stack(inputs).double().mean(0), f"allreduce AVG n={n}", tolerance=1e-5)


@pytest.mark.parametrize("factor_kind", ["host", "tensor"])
def test_allreduce_premul_sum(world, factor_kind):
    torch, dist = world.torch, world.dist
    inputs = [seeded(world, r, 777, torch.float32, "premul") for r in range(world.size)]
    x = on_gpu(world, inputs[world.rank])
    factor = 2.0 if factor_kind == "host" else torch.tensor([2.0], device=world.device)
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
    torch.cuda.synchronize()
    assert_equal(x, 2.0 * torch.stack(inputs).sum(0), f"PREMUL_SUM ({factor_kind} factor)")


def test_allreduce_bool_is_logical_or(world):
    torch, dist = world.torch, world.dist
    inputs = [seeded(world, r, 513, torch.int64, "bool", 0, 2).bool() for r in range(world.size)]
    x = on_gpu(world, inputs[world.rank])
    dist.all_reduce(x)
    torch.cuda.synchronize()
    assert_equal(x, torch.stack(inputs).any(0), "allreduce bool SUM")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "int16", "complex64", "bool", "uint32"])
def test_all_gather_moves_any_dtype(world, dtype):
    """Data movement on dtypes with and without a meshcomm type (int16, complex: moved as bytes)."""
    torch, dist = world.torch, world.dist
    dt = getattr(torch, dtype)
    make = (lambda r: seeded(world, r, 301, torch.float32, f"anydt/{dtype}").to(dt)) if dt != torch.bool else (
        lambda r: seeded(world, r, 301, torch.int64, f"anydt/{dtype}", 0, 2).bool())
    inputs = [make(r) for r in range(world.size)]
    out = torch.empty(world.size * 301, dtype=dt, device=world.device)
    dist.all_gather_into_tensor(out, on_gpu(world, inputs[world.rank]))
    torch.cuda.synchronize()
    expected = torch.cat([i.view(torch.uint8) for i in inputs])  # compared as bytes (no fp8 arithmetic)
    assert torch.equal(out.cpu().view(torch.uint8), expected), f"all_gather {dtype}"


@pytest.mark.parametrize("dtype", ["complex64", "float8_e4m3fn"])
def test_allreduce_complex_and_fp8(world, dtype):
    torch, dist = world.torch, world.dist
    dt = getattr(torch, dtype)
    inputs = [seeded(world, r, 257, torch.float32, f"cplx/{dtype}", -2, 3).to(dt) for r in range(world.size)]
    x = on_gpu(world, inputs[world.rank])
    dist.all_reduce(x)
    torch.cuda.synchronize()
    expected = sum(i.to(torch.complex128 if dt.is_complex else torch.float64) for i in inputs)
    got = x.cpu().to(torch.complex128 if dt.is_complex else torch.float64)
    assert torch.equal(got, expected), f"allreduce {dtype}"


def test_allreduce_coalesced(world):
    torch, dist = world.torch, world.dist
    shapes = [5, 1031, 64]
    inputs = [[seeded(world, r, n, torch.float32, f"coalesced/{i}") for i, n in enumerate(shapes)] for r in range(world.size)]
    xs = [on_gpu(world, t) for t in inputs[world.rank]]
    with dist._coalescing_manager(async_ops=True, device=world.device) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    torch.cuda.synchronize()
    for i, x in enumerate(xs):
        assert_equal(x, sum(inputs[r][i] for r in range(world.size)), f"coalesced allreduce #{i}")


# ---- broadcast / reduce ---------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", [False, True])
def test_broadcast_every_root(world, async_op):
    torch, dist = world.torch, world.dist
    for root in range(world.size):
        inputs = [seeded(world, r, 1031, torch.bfloat16, f"bcast/{root}") for r in range(world.size)]
        x = on_gpu(world, inputs[world.rank])
        finish(dist.broadcast(x, src=root, async_op=async_op), async_op)
        assert_equal(x, inputs[root], f"broadcast root {root}")


@pytest.mark.parametrize("async_op", [False, True])
def test_reduce_every_root(world, async_op):
    torch, dist = world.torch, world.dist
    for root in range(world.size):
        inputs = [seeded(world, r, 1031, torch.float32, f"reduce/{root}") for r in range(world.size)]
        x = on_gpu(world, inputs[world.rank])
        finish(dist.reduce(x, dst=root, async_op=async_op), async_op)
        if world.rank == root:
            assert_equal(x, torch.stack(inputs).sum(0), f"reduce root {root}")


# ---- gathers and scatters --------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("n", SIZES)
def test_all_gather_into_tensor(world, n, async_op):
    torch, dist = world.torch, world.dist
    inputs = [seeded(world, r, n, torch.float16, f"agt/{n}") for r in range(world.size)]
    out = torch.full((world.size * n,), -99.0, dtype=torch.float16, device=world.device)
    work = dist.all_gather_into_tensor(out, on_gpu(world, inputs[world.rank]), async_op=async_op)
    finish(work, async_op)
    assert_equal(out, torch.cat(inputs), f"all_gather_into_tensor n={n}")


@pytest.mark.parametrize("async_op", [False, True])
def test_all_gather_list(world, async_op):
    torch, dist = world.torch, world.dist
    inputs = [seeded(world, r, (7, 3), torch.int32, "agl") for r in range(world.size)]
    outs = [torch.full((7, 3), -1, dtype=torch.int32, device=world.device) for _ in range(world.size)]
    finish(dist.all_gather(outs, on_gpu(world, inputs[world.rank]), async_op=async_op), async_op)
    for r in range(world.size):
        assert_equal(outs[r], inputs[r], f"all_gather list [{r}]")


def test_all_gather_into_tensor_coalesced(world):
    torch, dist = world.torch, world.dist
    sizes = [3, 1031]
    inputs = [[seeded(world, r, n, torch.float32, f"agc/{i}") for i, n in enumerate(sizes)] for r in range(world.size)]
    outs = [torch.zeros(world.size * n, device=world.device) for n in sizes]
    with dist._coalescing_manager(async_ops=True, device=world.device) as cm:
        for out, x in zip(outs, inputs[world.rank]):
            dist.all_gather_into_tensor(out, on_gpu(world, x))
    cm.wait()
    torch.cuda.synchronize()
    for i, out in enumerate(outs):
        assert_equal(out, torch.cat([inputs[r][i] for r in range(world.size)]), f"coalesced all_gather #{i}")


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("n", SIZES)
def test_reduce_scatter_tensor(world, n, async_op):
    torch, dist = world.torch, world.dist
    inputs = [seeded(world, r, world.size * n, torch.float32, f"rst/{n}") for r in range(world.size)]
    out = torch.full((n,), -99.0, device=world.device)
    work = dist.reduce_scatter_tensor(out, on_gpu(world, inputs[world.rank]), async_op=async_op)
    finish(work, async_op)
    total = torch.stack(inputs).sum(0)
    assert_equal(out, total[world.rank * n : (world.rank + 1) * n], f"reduce_scatter_tensor n={n}")


def test_reduce_scatter_list_and_avg(world):
    torch, dist = world.torch, world.dist
    inputs = [[seeded(world, r, 33, torch.float32, f"rsl/{p}") for p in range(world.size)] for r in range(world.size)]
    out = torch.zeros(33, device=world.device)
    dist.reduce_scatter(out, [on_gpu(world, t) for t in inputs[world.rank]], op=dist.ReduceOp.AVG)
    torch.cuda.synchronize()
    expected = sum(inputs[r][world.rank] for r in range(world.size)) / world.size
    assert_equal(out, expected, "reduce_scatter list AVG", tolerance=1e-6)


def test_reduce_scatter_tensor_coalesced(world):
    torch, dist = world.torch, world.dist
    sizes = [2, 515]
    inputs = [[seeded(world, r, world.size * n, torch.float32, f"rsc/{i}") for i, n in enumerate(sizes)] for r in range(world.size)]
    outs = [torch.zeros(n, device=world.device) for n in sizes]
    with dist._coalescing_manager(async_ops=True, device=world.device) as cm:
        for out, x in zip(outs, inputs[world.rank]):
            dist.reduce_scatter_tensor(out, on_gpu(world, x))
    cm.wait()
    torch.cuda.synchronize()
    for i, (n, out) in enumerate(zip(sizes, outs)):
        total = sum(inputs[r][i] for r in range(world.size))
        assert_equal(out, total[world.rank * n : (world.rank + 1) * n], f"coalesced reduce_scatter #{i}")


@pytest.mark.parametrize("async_op", [False, True])
def test_gather_and_scatter_every_root(world, async_op):
    torch, dist = world.torch, world.dist
    for root in range(world.size):
        inputs = [seeded(world, r, 129, torch.float64, f"gather/{root}") for r in range(world.size)]
        outs = [torch.zeros(129, dtype=torch.float64, device=world.device) for _ in range(world.size)]
        work = dist.gather(on_gpu(world, inputs[world.rank]), outs if world.rank == root else None, dst=root,
                           async_op=async_op)
        finish(work, async_op)
        if world.rank == root:
            for r in range(world.size):
                assert_equal(outs[r], inputs[r], f"gather root {root} [{r}]")
        chunks = [seeded(world, p, 65, torch.int64, f"scatter/{root}") for p in range(world.size)]
        out = torch.zeros(65, dtype=torch.int64, device=world.device)
        work = dist.scatter(out, [on_gpu(world, c) for c in chunks] if world.rank == root else None, src=root,
                            async_op=async_op)
        finish(work, async_op)
        assert_equal(out, chunks[world.rank], f"scatter root {root}")


# ---- all-to-all -----------------------------------------------------------------------------------------


def splits_of(rank, size, salt):
    """Rows rank `rank` sends to each peer (0 included)."""
    return [(zlib.crc32(f"{salt}/{rank}/{p}".encode()) % 5) for p in range(size)]


@pytest.mark.parametrize("async_op", [False, True])
def test_all_to_all_single_equal(world, async_op):
    torch, dist = world.torch, world.dist
    n = 37
    inputs = [seeded(world, r, world.size * n, torch.float32, "a2a") for r in range(world.size)]
    out = torch.zeros(world.size * n, device=world.device)
    finish(dist.all_to_all_single(out, on_gpu(world, inputs[world.rank]), async_op=async_op), async_op)
    expected = torch.cat([inputs[p][world.rank * n : (world.rank + 1) * n] for p in range(world.size)])
    assert_equal(out, expected, "all_to_all_single equal splits")


def expected_alltoallv(world, inputs, splits, width):
    torch = world.torch
    parts = []
    for p in range(world.size):
        start = sum(splits[p][: world.rank])
        parts.append(inputs[p][start : start + splits[p][world.rank]])
    return torch.cat(parts) if parts else torch.zeros(0, width)


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("split_kind", ["list", "device"])
def test_all_to_all_single_splits(world, split_kind, async_op):
    """Changing splits every iteration; device splits go through meshcomm.torch (no host sync)."""
    torch = world.torch
    import meshcomm.torch as mt

    width = 3
    for it in range(4):
        salt = f"a2av/{split_kind}/{it}"
        splits = [splits_of(r, world.size, salt) for r in range(world.size)]
        inputs = [seeded(world, r, (sum(splits[r]), width), torch.bfloat16, salt) for r in range(world.size)]
        recv_splits = [splits[p][world.rank] for p in range(world.size)]
        out = torch.full((sum(recv_splits), width), -7, dtype=torch.bfloat16, device=world.device)
        send_splits = splits[world.rank]
        if split_kind == "device":
            send_arg = torch.tensor(send_splits, dtype=torch.int64, device=world.device)
            recv_arg = torch.tensor(recv_splits, dtype=torch.int64, device=world.device)
        else:
            send_arg, recv_arg = send_splits, recv_splits
        work = mt.all_to_all_single(out, on_gpu(world, inputs[world.rank]), recv_arg, send_arg, async_op=async_op)
        finish(work, async_op)
        assert_equal(out, expected_alltoallv(world, inputs, splits, width), f"all_to_all_single {split_kind} it {it}")


def test_all_to_all_list(world):
    torch, dist = world.torch, world.dist
    sizes = [[(r + p) % 3 + 1 for p in range(world.size)] for r in range(world.size)]  # sizes[r][p]: r → p
    inputs = [[seeded(world, r, sizes[r][p], torch.int32, f"a2al/{p}") for p in range(world.size)] for r in range(world.size)]
    outs = [torch.zeros(sizes[p][world.rank], dtype=torch.int32, device=world.device) for p in range(world.size)]
    dist.all_to_all(outs, [on_gpu(world, t) for t in inputs[world.rank]])
    torch.cuda.synchronize()
    for p in range(world.size):
        assert_equal(outs[p], inputs[p][world.rank], f"all_to_all list from {p}")


# ---- point-to-point -------------------------------------------------------------------------------------


def test_batch_isend_irecv_ring(world):
    torch, dist = world.torch, world.dist
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
    inputs = [seeded(world, r, 4099, torch.float32, "ring") for r in range(world.size)]
    recv = torch.zeros(4099, device=world.device)
    ops = [dist.P2POp(dist.isend, on_gpu(world, inputs[world.rank]), right),
           dist.P2POp(dist.irecv, recv, left)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    torch.cuda.synchronize()
    assert_equal(recv, inputs[left], "batch_isend_irecv ring")


def test_send_recv_pairs(world):
    if world.size < 2:
        pytest.skip("needs 2 ranks")
    torch, dist = world.torch, world.dist
    data = seeded(world, 0, 1000, torch.int64, "sendrecv")
    if world.rank == 0:
        dist.send(on_gpu(world, data), dst=1)
    elif world.rank == 1:
        got = torch.zeros(1000, dtype=torch.int64, device=world.device)
        dist.recv(got, src=0)
        torch.cuda.synchronize()
        assert_equal(got, data, "send/recv 0 → 1")
    torch.cuda.synchronize()


def test_barrier(world):
    world.dist.barrier(device_ids=[world.device.index])
    work = world.dist.barrier(device_ids=[world.device.index], async_op=True)
    work.wait()
    assert work.is_completed()


# ---- stream semantics, futures, graphs --------------------------------------------------------------------


def test_async_op_orders_with_the_current_stream(world):
    """Work queued before the op is seen by it; work after wait() sees the result; get_future() completes."""
    torch, dist = world.torch, world.dist
    x = torch.zeros(1 << 20, device=world.device)
    torch.cuda._sleep(10_000_000)  # the fill below runs late on the current stream
    x.fill_(world.rank + 1)
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    work.wait()
    y = x * 2  # on the current stream, after the wait
    torch.cuda.synchronize()
    total = world.size * (world.size + 1) / 2
    assert_equal(y[:4], torch.full((4,), 2 * total), "async allreduce ordering")
    assert fut.wait()[0] is not None
    assert work.is_completed()


def test_blocking_op_work_records_its_end_on_demand(world):
    """A blocking op (asyncOp False) records its end event only when asked: waiting from another stream,
    synchronize() and is_completed() still see the op."""
    torch, dist = world.torch, world.dist
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    inputs = [seeded(world, r, 65539, torch.float32, "deferred-end") for r in range(world.size)]
    x = on_gpu(world, inputs[world.rank])
    work = dist.group.WORLD.allreduce([x], opts)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        work.wait()  # the side stream now waits for the allreduce
        y = x * 2
    work.synchronize()
    assert work.is_completed()
    side.synchronize()
    assert_equal(y, 2 * sum(inputs), "read on another stream after wait()")


def test_timeout_raises_then_completes(world):
    """wait(timeout) raises when peers are late; the op still completes once they join."""
    if world.size < 2:
        pytest.skip("needs 2 ranks")
    torch, dist = world.torch, world.dist
    x = torch.ones(1024, device=world.device)
    dist.all_reduce(x)  # warm up: this buffer's context exists on every rank (no host exchange below)
    torch.cuda.synchronize()
    x.fill_(1)
    if world.rank == 0:
        work = dist.all_reduce(x, async_op=True)
        with pytest.raises(Exception, match="timed out"):
            work.wait(timeout=timedelta(seconds=2))
    world_cpu = dist.new_group(backend="gloo")
    dist.barrier(group=world_cpu)  # rank 0 has seen its timeout
    if world.rank != 0:
        dist.all_reduce(x)
    else:
        work.wait()
    torch.cuda.synchronize()
    assert_equal(x[:4], torch.full((4,), float(world.size)), "allreduce after a wait timeout")


@pytest.mark.parametrize("async_op", [False, True])
def test_cuda_graph_capture(world, async_op):
    torch, dist = world.torch, world.dist
    x = torch.zeros(4097, device=world.device)
    gathered = torch.zeros(world.size * 4097, device=world.device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: meshcomm builds per-buffer contexts outside capture
        for _ in range(2):
            dist.all_reduce(x)
            dist.all_gather_into_tensor(gathered, x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work = dist.all_reduce(x, async_op=async_op)
        if async_op:
            work.wait()
        work = dist.all_gather_into_tensor(gathered, x, async_op=async_op)
        if async_op:
            work.wait()
    for it in range(3):
        inputs = [seeded(world, r, 4097, torch.float32, f"graph/{it}") for r in range(world.size)]
        x.copy_(inputs[world.rank])
        graph.replay()
        torch.cuda.synchronize()
        total = torch.stack(inputs).sum(0)
        assert_equal(x, total, f"graph allreduce replay {it}")
        assert_equal(gathered, total.repeat(world.size), f"graph all_gather replay {it}")


def test_cuda_graph_all_to_all_device_splits(world):
    torch = world.torch
    import meshcomm.torch as mt

    rows = 8 * world.size
    inp = torch.zeros(rows, 2, device=world.device)
    out = torch.zeros(rows, 2, device=world.device)
    send = torch.zeros(world.size, dtype=torch.int64, device=world.device)
    recv = torch.zeros(world.size, dtype=torch.int64, device=world.device)
    mt.all_to_all_single(out, inp, recv, send)  # warm-up on these buffers
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mt.all_to_all_single(out, inp, recv, send)
    for it in range(3):
        salt = f"graph-a2av/{it}"
        splits = [splits_of(r, world.size, salt) for r in range(world.size)]  # ≤ 4 rows per peer
        inputs = [seeded(world, r, (sum(splits[r]), 2), torch.float32, salt) for r in range(world.size)]
        inp.zero_()
        inp[: sum(splits[world.rank])].copy_(inputs[world.rank])
        send.copy_(torch.tensor(splits[world.rank]))
        recv.copy_(torch.tensor([splits[p][world.rank] for p in range(world.size)]))
        graph.replay()
        torch.cuda.synchronize()
        expected = expected_alltoallv(world, inputs, splits, 2)
        assert_equal(out[: expected.shape[0]], expected, f"graph all_to_all device splits replay {it}")


# ---- groups ---------------------------------------------------------------------------------------------


def test_new_group_subset(world):
    torch, dist = world.torch, world.dist
    members = list(range(max(1, world.size // 2)))
    group = dist.new_group(members)
    inputs = [seeded(world, r, 100, torch.float32, "newgroup") for r in range(world.size)]
    if world.rank in members:
        x = on_gpu(world, inputs[world.rank])
        dist.all_reduce(x, group=group)
        torch.cuda.synchronize()
        assert_equal(x, sum(inputs[r] for r in members), "allreduce in new_group")
    else:
        assert group == dist.GroupMember.NON_GROUP_MEMBER


def test_split_group_parity(world):
    """Runs after test_new_group_subset on purpose: that group registered on half of the ranks only, so torch
    names the split's store prefix differently on the two halves (the meshcomm backend must not depend on it)."""
    torch, dist = world.torch, world.dist
    parent = dist.new_group(backend="meshcomm")  # CUDA only: split_group splits the meshcomm backend alone
    evens, odds = list(range(0, world.size, 2)), list(range(1, world.size, 2))
    split = [g for g in (evens, odds) if g]
    mine = evens if world.rank % 2 == 0 else odds
    for attempt in range(2):  # the same split twice: two distinct groups
        group = dist.split_group(parent_pg=parent, split_ranks=split)
        assert group.size() == len(mine)
        inputs = [seeded(world, r, 257, torch.int32, f"split/{attempt}") for r in range(world.size)]
        x = on_gpu(world, inputs[world.rank])
        dist.all_reduce(x, group=group)
        torch.cuda.synchronize()
        assert_equal(x, sum(inputs[r] for r in mine), f"allreduce in split_group #{attempt}")


def test_nccl_group_on_a_device_bound_meshcomm_world(world):
    """Mixed backends: new_group(backend="nccl") on the device-bound cuda:meshcomm world (torch 2.11 tried to
    split it from meshcomm's backend), then the same op on both groups gives the same result."""
    torch, dist = world.torch, world.dist
    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    nccl = dist.new_group(backend="nccl")
    inputs = [seeded(world, r, 4099, torch.bfloat16, "mixed") for r in range(world.size)]
    results = []
    for group in (None, nccl):
        x = on_gpu(world, inputs[world.rank])
        dist.all_reduce(x, group=group)
        out = torch.empty(4099 * world.size, dtype=torch.bfloat16, device=world.device)
        dist.all_gather_into_tensor(out, x, group=group)
        torch.cuda.synchronize()
        results.append((x.cpu(), out.cpu()))
    expected = sum(x.double() for x in inputs).to(torch.bfloat16)
    assert_equal(results[0][0], expected, "allreduce on meshcomm")
    for (m, n), what in zip(zip(*results), ("allreduce", "all_gather_into_tensor")):
        assert_equal(n, m, f"{what}: NCCL vs meshcomm")
    dist.destroy_process_group(nccl)


# ---- a model --------------------------------------------------------------------------------------------


def test_ddp_gradients_are_averaged(world):
    torch = world.torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(world.device)
    reference = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, device_ids=[world.device.index])
    inputs = [seeded(world, r, (8, 16), torch.float32, "ddp") for r in range(world.size)]
    ddp(on_gpu(world, inputs[world.rank])).square().sum().backward()
    torch.cuda.synchronize()
    # The average of every rank's gradient, computed here on a local copy of the same model.
    local = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(world.device)
    with torch.no_grad():
        for p, r in zip(local.parameters(), reference):
            p.copy_(r)
    for r in range(world.size):
        local(on_gpu(world, inputs[r])).square().sum().div(world.size).backward()
    for got, want in zip(model.parameters(), local.parameters()):
        assert_equal(got.grad, want.grad.cpu(), "DDP gradient", tolerance=1e-4 * max(1.0, want.grad.abs().max().item()))


# ---- errors ---------------------------------------------------------------------------------------------


def test_errors_name_rank_op_and_argument(world):
    torch, dist = world.torch, world.dist
    strided = torch.zeros(8, 2, device=world.device).t()
    with pytest.raises(RuntimeError, match=rf"rank {world.rank}: allreduce: tensors\[0\]: tensor is not contiguous"):
        dist.all_reduce(strided)
    out = torch.zeros(world.size * 4, dtype=torch.float16, device=world.device)
    with pytest.raises(RuntimeError, match="allgather_into_tensor: output: dtype"):
        dist.all_gather_into_tensor(out, torch.zeros(4, device=world.device))
    with pytest.raises(RuntimeError, match="allgather_into_tensor: output: .* elements, expected"):
        dist.all_gather_into_tensor(torch.zeros(3, device=world.device), torch.zeros(4, device=world.device))
    cuda_only = dist.new_group(backend="meshcomm")
    with pytest.raises(RuntimeError):
        dist.all_reduce(torch.zeros(4), group=cuda_only)  # a CPU tensor: no CPU backend in this group
    with pytest.raises(RuntimeError, match="bitwise"):
        dist.all_reduce(torch.zeros(4, dtype=torch.int32, device=world.device), op=dist.ReduceOp.BAND)
