"""Host overhead of a torch.distributed collective on the meshcomm backend over the raw meshcomm call
(issue 5 acceptance: <= 5 us), with ProcessGroupNCCL alongside for reference.

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/host_overhead.py [--calls 2000]

For each way of calling allreduce (SUM, in place, on a small float32 tensor: the kernel is short so the host
side dominates), on the current stream:
  raw       meshcomm.Comm.all_reduce(ptr, ptr, count, dtype, stream=...) — the Python binding of Comm::allReduce
  meshcomm  torch.distributed.all_reduce on a group whose CUDA backend is meshcomm
  nccl      torch.distributed.all_reduce on a ProcessGroupNCCL group (reference)
  dispatch  ProcessGroup.allreduce([t], opts).wait(): the C++ call below dist.all_reduce's Python wrapper
  backend   the group's MeshcommBackend.allreduce([t], opts).wait(): without torch's dispatcher
it measures the host time per call while enqueueing `--calls` back-to-back calls (no sync inside; fewer
calls than the launch queue holds, so the host never waits for the GPU), and the wall time per call until the
GPU has finished them all. Median of `--repeats` repeats. Rank 0 prints a table and the overhead
meshcomm - raw; exit 1 when it exceeds --limit-us. Also times async_op=True + wait() for both backends.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import meshcomm
import meshcomm.torch  # noqa: F401  registers the backend


def timed(call, calls, repeats):
    """(host us per call, wall us per call), medians over repeats."""
    host, wall = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        dist.barrier()  # gloo (CPU): the ranks start each repeat together
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        wall.append((t2 - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--elements", type=int, default=256, help="float32 elements (256: 1 KiB)")
    ap.add_argument("--limit-us", type=float, default=5.0)
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    # No device_id: with a device-bound default group, torch builds every NCCL group by splitting the default
    # group's CUDA backend, assuming it is NCCL (docs/torch.md, Limits).
    dist.init_process_group("cpu:gloo,cuda:meshcomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    nccl_group = dist.new_group(backend="nccl")
    raw = meshcomm.Comm.from_env(device=local)  # its own Comm over MASTER_ADDR:MASTER_PORT+1

    x = torch.randn(args.elements, device=device)
    stream = torch.cuda.current_stream()
    f32 = meshcomm.to_data_type(torch.float32)

    def raw_call():
        raw.all_reduce(x.data_ptr(), x.data_ptr(), x.numel(), f32, stream=stream.cuda_stream)

    def meshcomm_call():
        dist.all_reduce(x)

    def nccl_call():
        dist.all_reduce(x, group=nccl_group)

    world_pg = dist.group.WORLD
    sync_opts = dist.AllreduceOptions()
    sync_opts.asyncOp = False

    def dispatch_call():  # what dist.all_reduce runs below its Python wrapper
        world_pg.allreduce([x], sync_opts).wait()

    backend = world_pg._get_backend(device)

    def backend_call():  # the meshcomm backend itself, without torch's dispatcher
        backend.allreduce([x], sync_opts).wait()

    def meshcomm_async():
        dist.all_reduce(x, async_op=True).wait()

    def nccl_async():
        dist.all_reduce(x, group=nccl_group, async_op=True).wait()

    ways = [("raw meshcomm.Comm.all_reduce", raw_call), ("torch, cuda:meshcomm", meshcomm_call),
            ("torch, nccl", nccl_call), ("ProcessGroup.allreduce, cuda:meshcomm", dispatch_call),
            ("Backend.allreduce (meshcomm, no dispatch)", backend_call),
            ("torch async+wait, cuda:meshcomm", meshcomm_async), ("torch async+wait, nccl", nccl_async)]
    for _, call in ways:  # warm up: connections, algorithm contexts, NCCL's lazy init
        for _ in range(50):
            call()
    torch.cuda.synchronize()
    results = [(name, *timed(call, args.calls, args.repeats)) for name, call in ways]
    overhead = results[1][1] - results[0][1]
    ok = overhead <= args.limit_us
    if rank == 0:
        print(f"allreduce SUM float32 x {args.elements} in place on {world} ranks, {args.calls} calls x "
              f"{args.repeats} repeats (medians), torch {torch.__version__}")
        print(f"| {'way':40} | host us/call | wall us/call |")
        print(f"|{'-' * 42}|-------------:|-------------:|")
        for name, host, wall in results:
            print(f"| {name:40} | {host:12.2f} | {wall:12.2f} |")
        wrapper = results[1][1] - results[3][1]
        dispatch = results[3][1] - results[4][1]
        print(f"of which torch's Python wrapper (dist.all_reduce over ProcessGroup.allreduce): {wrapper:.2f} us; "
              f"torch's C++ dispatch (ProcessGroup over Backend.allreduce): {dispatch:.2f} us; the meshcomm "
              f"backend with its Python binding (Backend.allreduce over raw): {results[4][1] - results[0][1]:.2f} us")
        print(f"host overhead of the torch call over the raw call: {overhead:.2f} us "
              f"(limit {args.limit_us:g}): {'PASS' if ok else 'FAIL'}", flush=True)
    raw.close()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
