"""Communicator lifecycle on meshcomm's torchcomms backend: split with NCCL's semantics (members, order,
non-members, bad lists), CUDA-graph capture and replay, window RMA (put, signal, wait_signal,
map_remote_tensor), hints, per-op timeouts found by the watchdog, finalize.

Run: PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torchcomms
"""

import time
from datetime import timedelta

import pytest

from test_ops import finish, same


def summed(comm, comms, count=1031):
    """all_reduce SUM of each member's (global rank + 1) on `comm`: checks that comm's members talk."""
    torch = comms.torch
    x = torch.full((count,), float(comms.rank + 1), device=comms.device)
    finish(comm.all_reduce(x, comms.torchcomms.ReduceOp.SUM, False), False)
    return x.cpu()


def test_identity(comms):
    import meshcomm

    assert comms.mesh.get_backend() == "meshcomm"
    assert comms.mesh.get_backend_version() == meshcomm.__version__
    assert comms.mesh.get_name() == "test_mesh_world"
    assert comms.mesh.get_device() == comms.device


# ---- split -------------------------------------------------------------------------------------------------


def test_split_non_contiguous_and_reordered(comms):
    torch = comms.torch
    n = comms.size
    if n < 2:
        pytest.skip("needs 2 ranks")
    odd = [r for r in range(n) if r % 2 == 1]
    even_reversed = [r for r in range(n) if r % 2 == 0][::-1]  # new rank = index in the list
    mine = odd if comms.rank % 2 else even_reversed
    child = comms.mesh.split(mine, "split_parity")
    assert child is not None
    assert child.get_size() == len(mine) and child.get_rank() == mine.index(comms.rank)
    same(summed(child, comms), torch.full((1031,), float(sum(r + 1 for r in mine))), "all_reduce in the split")
    # A grandchild: the first two members of each parity group (child ranks 0 and 1).
    sub = mine[:2] if child.get_rank() < 2 else []
    grandchild = child.split(list(range(len(sub))), "split_pair")
    if sub:
        assert grandchild.get_size() == len(sub)
        same(summed(grandchild, comms), torch.full((1031,), float(sum(r + 1 for r in sub))), "nested split")
        grandchild.finalize()
    else:
        assert grandchild is None
    child.finalize()


def test_split_non_members_get_none(comms):
    torch = comms.torch
    first = list(range(max(1, comms.size // 2)))
    child = comms.mesh.split(first if comms.rank in first else [], "split_half")
    if comms.rank in first:
        same(summed(child, comms), torch.full((1031,), float(sum(r + 1 for r in first))), "half split")
        child.finalize()
    else:
        assert child is None


def test_split_rejects_bad_lists_on_every_rank(comms):
    n = comms.size
    with pytest.raises(RuntimeError, match="appears more than once"):
        comms.mesh.split(list(range(n)) + [0], "split_dup")
    with pytest.raises(RuntimeError, match="this rank is not in the list it passed"):
        comms.mesh.split([r for r in range(n) if r != comms.rank], "split_without_self")
    with pytest.raises(RuntimeError, match="out of range"):
        comms.mesh.split([comms.rank, n], "split_range")
    if n >= 2:
        # All ranks name one group (color 0) but rank 0 orders it differently: every member fails alike.
        mine = list(range(n)) if comms.rank == 0 else list(reversed(range(n)))
        with pytest.raises(RuntimeError, match="disagree on the subgroup"):
            comms.mesh.split(mine, "split_disagree")
    # Still in step.
    same(summed(comms.mesh, comms), comms.torch.full((1031,), float(sum(range(1, n + 1)))), "after bad splits")


# ---- CUDA graphs -------------------------------------------------------------------------------------------


def test_graph_capture_replays_collectives(comms):
    torch = comms.torch
    n = comms.size
    count = 1 << 16
    x = torch.empty(count, device=comms.device)
    gathered = torch.empty(count * n, device=comms.device)
    stream = torch.cuda.Stream()
    ReduceOp = comms.torchcomms.ReduceOp

    def ops():
        comms.mesh.all_reduce(x, ReduceOp.SUM, False)
        comms.mesh.all_gather_single(gathered, x, False)
        comms.mesh.all_to_all_single(gathered, gathered.clone(), False)

    x.fill_(1.0)
    with torch.cuda.stream(stream):
        ops()  # warm up: meshcomm builds its buffer contexts on the first call (not allowed in capture)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        ops()
    for it in range(3):
        x.copy_(comms.gpu(comms.seeded(comms.rank, count, torch.float32, f"graph/{it}")))
        graph.replay()
        torch.cuda.synchronize()
        total = sum(comms.seeded(r, count, torch.float32, f"graph/{it}") for r in range(n))
        same(x, total, f"replay {it}: all_reduce")
        same(gathered, total.repeat(n), f"replay {it}: all_gather then all_to_all")


# ---- windows -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "bfloat16"])
def test_window_put_signal_wait(comms, dtype, async_op):
    torch = comms.torch
    n = comms.size
    t = getattr(torch, dtype)
    count = 1031
    buf = comms.poison(count * n, t)
    win = comms.mesh.new_window()
    win.tensor_register(buf)
    comms.mesh.barrier(False)
    dst, src = (comms.rank + 1) % n, (comms.rank - 1) % n
    put_stream, wait_stream = torch.cuda.Stream(), torch.cuda.Stream()
    for it in range(5):
        data = comms.gpu(comms.seeded(comms.rank, count, t, f"win/{dtype}/{it}"))
        with torch.cuda.stream(put_stream):
            work = win.put(data, dst, comms.rank * count, async_op)
            if async_op:
                work.wait()
            signal = win.signal(dst, async_op)
            if async_op:
                signal.wait()
        with torch.cuda.stream(wait_stream):
            waited = win.wait_signal(src, async_op)
            if async_op:
                waited.wait()
            local = win.map_remote_tensor(comms.rank)
        wait_stream.synchronize()
        same(local[src * count:(src + 1) * count], comms.seeded(src, count, t, f"win/{dtype}/{it}"),
             f"window slot of rank {src}, iteration {it}")
        put_stream.synchronize()
        comms.mesh.barrier(False)
        torch.cuda.synchronize()
    # Every peer's window is mapped here (access type UNIFIED): read the next rank's directly.
    assert win.get_attr(dst).access_type == comms.torchcomms.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
    remote = win.map_remote_tensor(dst)
    assert remote.shape == buf.shape and remote.dtype == t
    same(remote[comms.rank * count:(comms.rank + 1) * count], comms.seeded(comms.rank, count, t, f"win/{dtype}/4"),
         "the next rank's window, read through map_remote_tensor")
    torch.cuda.synchronize()
    comms.mesh.barrier(False)
    torch.cuda.synchronize()
    win.tensor_deregister()


def test_window_rejects_what_does_not_fit(comms):
    torch = comms.torch
    buf = comms.poison(16, torch.float32)
    win = comms.mesh.new_window(buf)
    with pytest.raises(RuntimeError, match="do not fit rank"):
        win.put(comms.gpu(torch.ones(8)), (comms.rank + 1) % comms.size, 12, False)
    with pytest.raises(RuntimeError, match="differs from the window's"):
        win.put(comms.gpu(torch.ones(8, dtype=torch.float64)), 0, 0, False)
    torch.cuda.synchronize()
    win.tensor_deregister()


# ---- hints, timeouts, finalize -----------------------------------------------------------------------------


def test_hints_are_honoured_or_rejected_by_name(comms):
    torch = comms.torch
    torchcomms = comms.torchcomms
    sized = torchcomms.new_comm("meshcomm", comms.device, name="test_hinted",
                                hints={"meshcomm::scratch_bytes": str(8 << 20), "channels_per_peer": "2"})
    same(summed(sized, comms, 1 << 20), torch.full((1 << 20,), float(sum(range(1, comms.size + 1)))),
         "all_reduce on a hinted communicator")
    sized.finalize()
    with pytest.raises(RuntimeError, match="unknown hint 'meshcomm::fast_init'"):
        torchcomms.new_comm("meshcomm", comms.device, name="test_bad_hint", hints={"meshcomm::fast_init": "1"})
    # A hint without meshcomm's prefix belongs to another backend (torchcomms passes every hint to every
    # backend): ignored, with a warning.
    other = torchcomms.new_comm("meshcomm", comms.device, name="test_foreign_hint", hints={"fastInitMode": "1"})
    x = comms.gpu(torch.ones(4))
    finish(other.all_reduce(x, torchcomms.ReduceOp.SUM, False, hints={"hint_key": "hint_value"}), False)
    same(x, torch.full((4,), float(comms.size)), "all_reduce with a foreign hint")
    other.finalize()


def test_an_op_a_peer_misses_times_out_and_fails_the_communicator(comms):
    """Rank 0 enqueues an all_reduce nobody joins, on a communicator with a 2 s timeout that does not abort the
    process: its watchdog finds it, the work's wait() and the next op raise naming the op and the timeout."""
    torch = comms.torch
    torchcomms = comms.torchcomms
    lonely = torchcomms.new_comm("meshcomm", comms.device, name="test_timeout", timeout=timedelta(seconds=2),
                                 abort_process_on_timeout_or_error=False)
    if comms.rank == 0:
        work = lonely.all_reduce(comms.gpu(torch.ones(1024)), torchcomms.ReduceOp.SUM, True)
        start = time.monotonic()
        failure = None
        while failure is None and time.monotonic() - start < 30:
            try:
                work.wait()  # stream-ordered: raises once the watchdog has recorded the failure
            except RuntimeError as e:
                failure = str(e)
            time.sleep(0.05)
        elapsed = time.monotonic() - start
        assert failure is not None, "the missed all_reduce was not found within 30 s"
        assert 1.5 <= elapsed <= 30, elapsed
        assert not work.is_completed()
        assert "failed earlier (found by its watchdog)" in failure and "all_reduce #" in failure, failure
        assert "did not complete within its timeout of 2000 ms" in failure, failure
        with pytest.raises(RuntimeError, match="failed earlier"):
            lonely.barrier(False)
        with pytest.raises(RuntimeError, match="failed earlier"):
            lonely.finalize()
        del work
    comms.mesh.barrier(False)  # the world communicator is unaffected
    torch.cuda.synchronize()
    if comms.rank != 0:
        lonely.finalize()
    del lonely


def test_finalize_twice_is_an_error_and_ops_after_finalize_name_it(comms):
    torch = comms.torch
    c = comms.torchcomms.new_comm("meshcomm", comms.device, name="test_finalize")
    c.finalize()
    with pytest.raises(RuntimeError, match="was already finalized"):
        c.finalize()
    with pytest.raises(RuntimeError, match="'test_finalize' was finalized"):
        c.all_reduce(comms.gpu(torch.ones(4)), comms.torchcomms.ReduceOp.SUM, False)
