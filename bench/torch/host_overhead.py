"""Host overhead of a torch.distributed collective on the meshcomm backend over the raw meshcomm call
(acceptance: <= 5 us), with ProcessGroupNCCL and a no-op backend alongside for reference.

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/host_overhead.py [--calls 500]

For each way of calling allreduce (SUM, in place, on a small float32 tensor: the kernel is short so the host
side dominates), on the current stream:
  raw       meshcomm.Comm.all_reduce(ptr, ptr, count, dtype, stream=...) — the Python binding of Comm::allReduce
  meshcomm  torch.distributed.all_reduce on a group whose CUDA backend is meshcomm
  nccl      torch.distributed.all_reduce on a ProcessGroupNCCL group (reference)
  no-op     torch.distributed.all_reduce on torch's FakeProcessGroup (launches nothing): torch's own floor
  dispatch  ProcessGroup.allreduce([t], opts).wait(): the C++ call below dist.all_reduce's Python wrapper
  backend   the group's MeshcommBackend.allreduce([t], opts).wait(): without torch's dispatcher
it measures the host time per call while enqueueing `--calls` back-to-back calls (no sync inside; fewer
calls than the launch queue holds, so the host never waits for the GPU), and the wall time per call until the
GPU has finished them all. The ways take turns within each of `--repeats` rounds (drift hits them alike);
medians over rounds. Also times async_op=True + wait() for both backends.

Then the same loop in C++ (meshcomm._torch_backend._host_time_allreduce: no Python inside) for each layer:
Comm::allReduce, MeshcommBackend::allreduce + wait, ProcessGroup::allreduce + wait (torch's dispatcher), and
ProcessGroup::allreduce + wait on torch's FakeProcessGroup, which splits the overhead into torch's Python
layer, torch's C++ dispatch and the meshcomm backend.

Rank 0 prints the tables and the overhead meshcomm - raw = torch's floor (no-op) + meshcomm's share; exit 1
when the overhead exceeds --limit-us. `--only SUBSTRING` times only the matching ways (for a profiler).
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


def timed_once(call, calls):
    """(host us per call, wall us per call) of `calls` back-to-back calls."""
    torch.cuda.synchronize()
    dist.barrier()  # gloo (CPU): the ranks start together
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def noop_group():
    """A group on torch's FakeProcessGroup (no communication), or None when this torch lacks it."""
    try:
        import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers backend "fake"
        return dist.new_group(backend="fake")
    except Exception as e:  # noqa: BLE001  reference row only
        print(f"no-op backend unavailable: {e}", file=sys.stderr)
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--elements", type=int, default=256, help="float32 elements (256: 1 KiB)")
    ap.add_argument("--limit-us", type=float, default=5.0)
    ap.add_argument("--only", default=None, help="time only the ways whose name contains this")
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    # No device_id: with a device-bound default group, torch builds every NCCL group by splitting the default
    # group's CUDA backend, assuming it is NCCL (docs/torch.md, Limits).
    dist.init_process_group("cpu:gloo,cuda:meshcomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    nccl_group = dist.new_group(backend="nccl")
    fake_group = noop_group()
    raw = meshcomm.Comm.from_env(device=local)  # its own Comm over MASTER_ADDR:MASTER_PORT+1

    x = torch.randn(args.elements, device=device)
    stream = torch.cuda.current_stream()
    f32 = meshcomm.to_data_type(torch.float32)
    world_pg = dist.group.WORLD
    sync_opts = dist.AllreduceOptions()
    sync_opts.asyncOp = False
    backend = world_pg._get_backend(device)

    ways = {
        "raw meshcomm.Comm.all_reduce":
            lambda: raw.all_reduce(x.data_ptr(), x.data_ptr(), x.numel(), f32, stream=stream.cuda_stream),
        "torch, cuda:meshcomm": lambda: dist.all_reduce(x),
        "torch, nccl": lambda: dist.all_reduce(x, group=nccl_group),
        # what dist.all_reduce runs below its Python wrapper:
        "ProcessGroup.allreduce, cuda:meshcomm": lambda: world_pg.allreduce([x], sync_opts).wait(),
        # the meshcomm backend itself, without torch's dispatcher:
        "Backend.allreduce (meshcomm, no dispatch)": lambda: backend.allreduce([x], sync_opts).wait(),
        "torch async+wait, cuda:meshcomm": lambda: dist.all_reduce(x, async_op=True).wait(),
        "torch async+wait, nccl": lambda: dist.all_reduce(x, group=nccl_group, async_op=True).wait(),
    }
    if fake_group is not None:
        ways["torch, no-op backend (FakeProcessGroup)"] = lambda: dist.all_reduce(x, group=fake_group)
    if args.only:
        ways = {k: v for k, v in ways.items() if args.only in k}
    for call in ways.values():  # warm up: connections, algorithm contexts, NCCL's lazy init
        for _ in range(50):
            call()
    torch.cuda.synchronize()
    samples = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, call in ways.items():
            samples[name].append(timed_once(call, args.calls))
    results = {name: (statistics.median(h for h, _ in s), statistics.median(w for _, w in s))
               for name, s in samples.items()}
    if args.only:
        if rank == 0:
            for name, (host, wall) in results.items():
                print(f"{name}: host {host:.2f} us/call, wall {wall:.2f} us/call", flush=True)
        raw.close()
        dist.destroy_process_group()
        return 0

    layers = ("comm", "backend", "process_group", "noop_process_group")
    cxx_samples = {k: [] for k in layers}
    for _ in range(args.repeats):
        dist.barrier()
        for k, v in meshcomm.torch._torch_backend._host_time_allreduce(world_pg, x, args.calls).items():
            cxx_samples[k].append(v)
    cxx = {k: statistics.median(v) for k, v in cxx_samples.items()}

    t_raw = results["raw meshcomm.Comm.all_reduce"][0]
    t_torch = results["torch, cuda:meshcomm"][0]
    overhead = t_torch - t_raw
    ok = overhead <= args.limit_us
    if rank == 0:
        print(f"allreduce SUM float32 x {args.elements} in place on {world} ranks, {args.calls} calls x "
              f"{args.repeats} rounds (medians), torch {torch.__version__}")
        print(f"| {'way':42} | host us/call | wall us/call |")
        print(f"|{'-' * 44}|-------------:|-------------:|")
        for name, (host, wall) in results.items():
            print(f"| {name:42} | {host:12.2f} | {wall:12.2f} |")
        print()
        print("the same loop in C++ (no Python), host us/call:")
        print(f"| {'layer':58} | host us/call |")
        print(f"|{'-' * 60}|-------------:|")
        names = {"comm": "Comm::allReduce (raw)", "backend": "MeshcommBackend::allreduce + wait",
                 "process_group": "ProcessGroup::allreduce + wait (torch dispatch)",
                 "noop_process_group": "ProcessGroup::allreduce + wait, FakeProcessGroup (no-op)"}
        for k in layers:
            print(f"| {names[k]:58} | {cxx[k]:12.2f} |")
        print(f"C++: meshcomm backend over Comm::allReduce {cxx['backend'] - cxx['comm']:.2f} us; torch's "
              f"dispatch over the backend {cxx['process_group'] - cxx['backend']:.2f} us; Python: torch's layer "
              f"(dist.all_reduce over C++ ProcessGroup::allreduce) {t_torch - cxx['process_group']:.2f} us; "
              f"the raw call's Python binding {t_raw - cxx['comm']:.2f} us")
        noop = results.get("torch, no-op backend (FakeProcessGroup)")
        if noop is not None:
            print(f"torch's floor (dist.all_reduce on a no-op backend): {noop[0]:.2f} us; meshcomm's share of "
                  f"the overhead (torch on meshcomm - no-op - raw): {t_torch - noop[0] - t_raw:.2f} us")
        print(f"host overhead of the torch call over the raw call: {overhead:.2f} us "
              f"(limit {args.limit_us:g}): {'PASS' if ok else 'FAIL'}", flush=True)
    raw.close()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
