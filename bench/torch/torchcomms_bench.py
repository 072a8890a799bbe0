"""torchcomms-level collectives on meshcomm against torchcomms' NCCL backend, in one process (docs/torchcomms.md):
all_reduce, all_gather_single, reduce_scatter_single and all_to_all_single, 1 KiB to 1 GiB, eager and
CUDA-graph timing, plus the host cost of one eager call.

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/torchcomms_bench.py [--json out.json]

Sizes and bus bandwidth follow nccl-tests: size = bytes of the larger buffer (all_reduce: the tensor;
all_gather: the output; reduce_scatter: the input; all_to_all: either), algbw = size / time, busbw = algbw x
2(n-1)/n for all_reduce and (n-1)/n for the others. Time per call: eager = `--iters` back-to-back calls on the
current stream (async_op=False) timed with CUDA events after `--warmup` calls; graph = the same calls captured
once in a CUDA graph, replayed `--replays` times. The reported time is the slowest rank's. Host = host time
per call while enqueueing 1 KiB calls back to back (no synchronisation inside the loop). Inputs are random
bf16; the first call of every (op, size) is checked against the other backend's result (exact match for the
data movement ops, within bf16 rounding for the reductions). ratio = NCCL time / meshcomm time (> 1: meshcomm
faster). Rank 0 prints one table per op and writes --json.
"""
import argparse
import json
import os
import sys
import time

import torch
import torchcomms
from cuda_timing import graph_time_per_call_us, time_per_call_us
from run_metadata import run_metadata

OPS = ["all_reduce", "all_gather_single", "reduce_scatter_single", "all_to_all_single"]


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def sizes(lo, hi, factor):
    s = lo
    while s <= hi:
        yield s
        s *= factor


class Case:
    """Buffers of one (op, size) and the call that runs it on a communicator."""

    def __init__(self, op, size, n, device):
        self.op, self.size = op, size
        elems = size // 2  # bf16
        elems -= elems % n
        self.elems = max(elems, n)
        small = self.elems // n
        g = torch.Generator(device=device).manual_seed(1234 + size)
        big = torch.randn(self.elems, generator=g, device=device).to(torch.bfloat16)
        if op == "all_reduce":
            self.input, self.output = big, big.clone()
        elif op == "all_gather_single":
            self.input, self.output = big[:small].clone(), torch.empty_like(big)
        elif op == "reduce_scatter_single":
            self.input, self.output = big, torch.empty(small, dtype=torch.bfloat16, device=device)
        else:
            self.input, self.output = big, torch.empty_like(big)
        self.pristine = self.input.clone()

    def call(self, comm, sum_op):
        if self.op == "all_reduce":
            return comm.all_reduce(self.output, sum_op, False)
        if self.op == "all_gather_single":
            return comm.all_gather_single(self.output, self.input, False)
        if self.op == "reduce_scatter_single":
            return comm.reduce_scatter_single(self.output, self.input, sum_op, False)
        return comm.all_to_all_single(self.output, self.input, False)

    def reset(self):
        if self.op == "all_reduce":
            self.output.copy_(self.pristine)


def slowest(comm, value):
    t = torch.tensor([value], dtype=torch.float64, device=torch.cuda.current_device())
    comm.all_reduce(t, torchcomms.ReduceOp.MAX, False)
    return t.item()


def time_eager(comm, case, sum_op, warmup, iters):
    return slowest(comm, time_per_call_us(lambda: case.call(comm, sum_op), warmup, iters,
                                          before_timing=lambda: comm.barrier(False)))


def time_graph(comm, case, sum_op, iters, replays):
    case.call(comm, sum_op)  # meshcomm: the buffers' contexts exist before the capture
    torch.cuda.synchronize()
    return slowest(comm, graph_time_per_call_us(lambda side: case.call(comm, sum_op), iters, replays,
                                                before_timing=lambda: comm.barrier(False)))


def host_cost(comm, sum_op, calls):
    x = torch.ones(512, dtype=torch.bfloat16, device=torch.cuda.current_device())
    for _ in range(20):
        comm.all_reduce(x, sum_op, False)
    torch.cuda.synchronize()
    comm.barrier(False)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        comm.all_reduce(x, sum_op, False)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return slowest(comm, (t1 - t0) / calls * 1e6)


def check(meshcomm_out, nccl_out, op):
    if op in ("all_gather_single", "all_to_all_single"):
        return bool(torch.equal(meshcomm_out, nccl_out))
    return bool(torch.allclose(meshcomm_out.float(), nccl_out.float(), rtol=2e-2, atol=2e-2))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--min", default="1K")
    p.add_argument("--max", default="1G")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--replays", type=int, default=5)
    p.add_argument("--host-calls", type=int, default=2000)
    p.add_argument("--json", default="")
    args = p.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    import meshcomm.torchcomms  # noqa: F401  (the entry point would load it too; fail early with its message)

    comms = {"meshcomm": torchcomms.new_comm("meshcomm", device, name="bench_meshcomm"),
             "nccl": torchcomms.new_comm("nccl", device, name="bench_nccl")}
    rank, n = comms["meshcomm"].get_rank(), comms["meshcomm"].get_size()
    sum_op = torchcomms.ReduceOp.SUM
    rows, wrong = [], 0
    host = {name: host_cost(c, sum_op, args.host_calls) for name, c in comms.items()}
    for op in args.ops.split(","):
        factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
        for size in sizes(parse_size(args.min), parse_size(args.max), args.factor):
            case = Case(op, size, n, device)
            outputs = {}
            for name, c in comms.items():
                case.reset()
                case.call(c, sum_op)
                torch.cuda.synchronize()
                outputs[name] = case.output.clone()
            ok = check(outputs["meshcomm"], outputs["nccl"], op)
            wrong += 0 if ok else 1
            iters = args.iters if size < (256 << 20) else max(5, args.iters // 4)
            row = {"op": op, "bytes": case.elems * 2, "ok": ok}
            for name, c in comms.items():
                row[f"{name}_eager_us"] = time_eager(c, case, sum_op, args.warmup, iters)
                row[f"{name}_graph_us"] = time_graph(c, case, sum_op, iters, args.replays)
            for mode in ("eager", "graph"):
                row[f"{mode}_ratio"] = row[f"nccl_{mode}_us"] / row[f"meshcomm_{mode}_us"]
                row[f"meshcomm_{mode}_busbw"] = row["bytes"] / row[f"meshcomm_{mode}_us"] / 1e3 * factor
                row[f"nccl_{mode}_busbw"] = row["bytes"] / row[f"nccl_{mode}_us"] / 1e3 * factor
            rows.append(row)
            del case
            torch.cuda.empty_cache()
    if rank == 0:
        print(f"# torchcomms ops, bf16, {n} ranks, {torch.cuda.get_device_name()}; time us (slowest rank), "
              "busbw GB/s; ratio = NCCL time / meshcomm time")
        print(f"host us per eager 1 KiB all_reduce call: meshcomm {host['meshcomm']:.2f}, NCCL {host['nccl']:.2f}")
        for op in args.ops.split(","):
            print(f"\n## {op}\n| bytes | meshcomm eager | NCCL eager | ratio | meshcomm graph | NCCL graph | ratio "
                  "| meshcomm busbw (graph) | ok |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|")
            for r in rows:
                if r["op"] != op:
                    continue
                print(f"| {r['bytes']} | {r['meshcomm_eager_us']:.2f} | {r['nccl_eager_us']:.2f} | "
                      f"{r['eager_ratio']:.2f} | {r['meshcomm_graph_us']:.2f} | {r['nccl_graph_us']:.2f} | "
                      f"{r['graph_ratio']:.2f} | {r['meshcomm_graph_busbw']:.1f} | {'yes' if r['ok'] else 'NO'} |")
        print(f"\n{wrong} wrong")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**run_metadata(n), "host_us": host, "rows": rows}, f, indent=1)
    for c in comms.values():
        c.finalize()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
