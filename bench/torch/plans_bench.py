"""The shipped meshcomm.dsl plans against the fastest native algorithm of the same collective, per size: each
program compiled with several instance counts (--instances; a plan's thread blocks and chunks replicated k
times), time per call (slowest rank), nccl-tests busbw, the ratio native time / plan time (>= 0.9 means within
10%), a check of every result against the native algorithm's (eager, then a CUDA graph of the plan replayed
twice on new inputs), and each plan's first-call setup time (add_algorithm + first execute). Sizes a plan
declines (its scratch or packet region) are listed as declined.

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/plans_bench.py [--timing graph] [--json out.json]
"""
import argparse
import json
import os
import sys
import time

import torch
from cuda_timing import graph_time_per_call_us, time_per_call_us
from run_metadata import run_metadata

import meshcomm
from meshcomm.dsl import programs
from meshcomm.dsl.collectives import units

BUSBW = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
         "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}


def slowest(comm, value, stream):
    t = torch.tensor([value], dtype=torch.float32, device="cuda")
    comm.all_reduce(t.data_ptr(), t.data_ptr(), 1, meshcomm.to_data_type(torch.float32), op=meshcomm.ReduceOp.MAX,
                    stream=stream)
    torch.cuda.synchronize()
    return t.item()


def timed(comm, call, args, stream):
    """call(on): one call enqueued on stream `on`; the slowest rank's time per call with args.timing."""
    if args.timing == "graph":
        call(stream)  # a call the algorithm declines raises here, before any capture
        us = graph_time_per_call_us(lambda side: call(side.cuda_stream), args.iters)
    else:
        us = time_per_call_us(lambda: call(stream), args.warmup, args.iters)
    return slowest(comm, us, stream)


def graph_check(run_plan, run_native, x, out, ref):
    """The plan captured in a CUDA graph, replayed on two fresh inputs, against the native algorithm eagerly."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        run_plan(side.cuda_stream)
    ok = True
    for _ in range(2):
        x.copy_(torch.randint(-8, 8, x.shape, device="cuda").float())
        out.fill_(-1.0)
        graph.replay()
        run_native()
        torch.cuda.synchronize()
        ok = ok and torch.equal(out, ref)
    return ok


def instance_counts(spec, name, num_ranks, report=print):
    """The instance counts of --instances for one program, duplicates dropped; counts the program cannot
    compile with (its blocks times the count above the executor's limit) are skipped with a line saying so."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    counts = [programs.fill_instances(name, num_ranks, sms) if v == "fill" else int(v) for v in spec.split(",")]
    limit = programs.max_instances(name, num_ranks)
    for k in sorted({k for k in counts if k > limit}):
        report(f"{name} x{k}: skipped, at most x{limit} on {num_ranks} ranks (the executor's thread-block limit)")
    return sorted({k for k in counts if k <= limit})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min-bytes", type=int, default=4 << 10, help="smallest input per rank")
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--instances", default="1,8,32,fill",
                   help="instance counts to compile each program with; fill: as many as this GPU runs "
                        "(its multiprocessors, at most the executor's 128 blocks, over the program's blocks "
                        "at one instance)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--timing", choices=("eager", "graph"), default="eager",
                   help="eager: each call launched from Python (host path included); graph: the calls captured "
                        "into a CUDA graph and replayed (GPU time)")
    p.add_argument("--programs", help="comma-separated shipped program names (default: every one)")
    p.add_argument("--json")
    args = p.parse_args()
    names = args.programs.split(",") if args.programs else programs.NAMES
    unknown = sorted(set(names) - set(programs.NAMES))
    if unknown:
        p.error(f"unknown programs {unknown}; shipped: {programs.NAMES}")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    stream = torch.cuda.current_stream().cuda_stream
    f32 = meshcomm.to_data_type(torch.float32)
    rows, wrong, native_us = [], 0, {}
    with meshcomm.Comm.from_env(device=local_rank) as comm:
        rank, n = comm.rank, comm.size
        executor = meshcomm.Executor(comm)
        report = print if rank == 0 else (lambda line: None)  # one rank prints
        for name in names:
            module = __import__(f"meshcomm.dsl.programs.{name}", fromlist=["supports"])
            if not module.supports(n):
                continue
            for k in instance_counts(args.instances, name, n, report=report):
                plan = programs.get(name)(n, instances=k).to_json()
                plan["name"] = f"{name}_x{k}"
                lo, hi = plan["min_message_size"], plan["max_message_size"]
                plan["min_message_size"] = 0
                t0 = time.perf_counter()
                alg = meshcomm.PlanAlgorithm.from_json(json.dumps(plan))
                comm.add_algorithm(alg)
                collective = plan["collective"]
                iu, ou = units(collective, n)
                natives = [a for a in meshcomm.build_default_algorithms() if a.collective == alg.collective]
                size, first = args.min_bytes, True
                while size <= min(args.max_bytes, hi):
                    count = size // 4 // iu
                    x = torch.randint(-8, 8, (iu * count,), device="cuda").float()
                    out = torch.full((ou * count,), -1.0, device="cuda")
                    ref = torch.full_like(out, -2.0)
                    regs = [comm.register_buffer(t.data_ptr(), t.numel() * 4) for t in (x, out, ref)]

                    def run(a, dst, on=stream):
                        a.execute(comm, x.data_ptr(), dst.data_ptr(), x.numel() * 4, dst.numel() * 4, f32,
                                  stream=on, executor=executor)
                    bytes_ = max(iu, ou) * count * 4
                    try:
                        run(alg, out)
                    except meshcomm.InvalidUsageError as e:  # every rank declines alike, before enqueuing
                        if rank == 0:
                            print(f"{name:24s} x{k:<3d} {bytes_:>11d} B  declined: {e}", flush=True)
                        rows.append({"plan": name, "instances": k, "collective": collective, "bytes": bytes_,
                                     "declined": str(e)})
                        for index in regs:
                            comm.deregister_buffer(index)
                        break
                    if first:
                        torch.cuda.synchronize()
                        setup_ms = slowest(comm, (time.perf_counter() - t0) * 1e3, stream)
                        first = False
                    plan_us = timed(comm, lambda on: run(alg, out, on), args, stream)
                    key = (collective, size)
                    if key not in native_us:
                        best = None
                        for native in natives:
                            try:
                                us = timed(comm, lambda on: run(comm.algorithms[native.name], ref, on), args,
                                           stream)
                            except meshcomm.Error:
                                continue  # declined this call (size, registration): every rank declines alike
                            if best is None or us < best[1]:
                                best = (native.name, us)
                        native_us[key] = best
                    best = native_us[key]
                    run(comm.algorithms[best[0]], ref)
                    torch.cuda.synchronize()
                    ok = torch.equal(out, ref)
                    graph_ok = graph_check(lambda on: run(alg, out, on), lambda: run(comm.algorithms[best[0]], ref),
                                           x, out, ref)
                    wrong += 0 if ok and graph_ok else 1
                    row = {"plan": name, "instances": k, "collective": collective, "bytes": bytes_,
                           "plan_us": plan_us, "native": best[0], "native_us": best[1], "ratio": best[1] / plan_us,
                           "ok": ok, "graph_ok": graph_ok, "in_range": lo <= size <= hi,
                           "busbw_gbs": bytes_ / plan_us / 1e3 * BUSBW[collective](n), "setup_ms": setup_ms}
                    rows.append(row)
                    if rank == 0:
                        print(f"{name:24s} x{k:<3d} {bytes_:>11d} B  plan {plan_us:9.1f} us  {row['busbw_gbs']:7.1f} "
                              f"GB/s  native {best[0]:22s} {best[1]:9.1f} us  ratio {row['ratio']:5.2f}  "
                              f"{'ok' if ok else 'WRONG'} graph {'ok' if graph_ok else 'WRONG'}  "
                              f"setup {setup_ms:.1f} ms", flush=True)
                    for index in regs:
                        comm.deregister_buffer(index)
                    size *= 4
        if rank == 0:
            print(f"{wrong} wrong")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({**run_metadata(n), "rows": rows}, f, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
