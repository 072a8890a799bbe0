"""MoE expert-parallel dispatch and combine (docs/ep.md): meshcomm.ep against the same token movement done with
torch.distributed.all_to_all_single on NCCL, and against DeepEP V1 when it is importable, in one process group.

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/ep_bench.py [--deepep] [--json out.json]

Workload (DeepEP's test_intranode defaults): --tokens per rank, --hidden bf16 elements, top---topk of --experts
experts chosen at random per token. Dispatch moves every token once to each rank holding one of its experts;
combine sums the rows coming back. meshcomm and DeepEP: Buffer.dispatch (layout precomputed, host waits for the
receive count as in DeepEP's benchmark) and Buffer.combine; NCCL: the rows packed by destination (index_select),
all_to_all_single with the counts as splits, then the reverse all_to_all_single and an index_add sum.
With --low-latency it also times the low-latency mode (DeepEP's low_latency_dispatch with FP8 and
low_latency_combine, --ll-tokens per rank of --ll-experts experts) against the same NCCL movement at that size.
Bandwidth is counted as DeepEP does: received rows x hidden bytes (bf16, or FP8 plus scales) / time. Time per call:
CUDA events over --iters calls after --warmup, the slowest rank's mean. Results are compared with the NCCL path
(received rows exactly, combined rows within DeepEP's calc_diff < 5e-6) before timing. Rank 0 prints a table;
ratio = peer time / meshcomm time (> 1: meshcomm faster).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from cuda_timing import time_per_call_us
from run_metadata import run_metadata

import meshcomm.ep


def calc_diff(x, y):
    """DeepEP's similarity measure: 1 - 2·Σxy / Σ(x² + y²) on x+1, y+1 in float64."""
    x, y = x.double() + 1, y.double() + 1
    denominator = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denominator) if denominator > 0 else 0.0


def per_token_fp8(x):
    """x [T, H] bf16 -> (FP8 e4m3 [T, H], float32 scales [T, H/128]): one scale per 128 elements."""
    t, h = x.shape
    blocks = x.float().view(t, h // 128, 128)
    amax = blocks.abs().amax(dim=2).clamp(min=1e-4)
    return (blocks * (448.0 / amax.unsqueeze(2))).to(torch.float8_e4m3fn).view(t, h), amax / 448.0


def timed(call, warmup, iters):
    slowest = torch.tensor([time_per_call_us(call, warmup, iters)], dtype=torch.float64, device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item()


class Workload:
    def __init__(self, args, rank, ranks):
        g = torch.Generator(device="cuda").manual_seed(4321 + rank)
        self.x = torch.randn(args.tokens, args.hidden, generator=g, device="cuda").to(torch.bfloat16)
        scores = torch.rand(args.tokens, args.experts, generator=g, device="cuda")
        self.topk_idx = scores.topk(args.topk, dim=1).indices.to(torch.int64)
        self.topk_weights = torch.rand(args.tokens, args.topk, generator=g, device="cuda")
        self.experts, self.ranks = args.experts, ranks
        dest = self.topk_idx // (args.experts // ranks)
        self.in_rank = torch.zeros(args.tokens, ranks, dtype=torch.bool, device="cuda")
        self.in_rank.scatter_(1, dest, True)
        # NCCL path: (destination, token) pairs in destination order, and the split sizes both ways.
        self.send_dest, self.send_token = self.in_rank.t().nonzero(as_tuple=True)
        self.send_counts = self.in_rank.sum(0)
        recv_counts = torch.empty_like(self.send_counts)
        dist.all_to_all_single(recv_counts, self.send_counts)
        self.send_splits, self.recv_splits = self.send_counts.tolist(), recv_counts.tolist()
        self.recv_rows = sum(self.recv_splits)


def nccl_dispatch(w):
    send = w.x.index_select(0, w.send_token)
    recv = torch.empty(w.recv_rows, w.x.size(1), dtype=w.x.dtype, device="cuda")
    dist.all_to_all_single(recv, send, w.recv_splits, w.send_splits)
    return recv


def nccl_combine(w, y):
    back = torch.empty(w.send_token.numel(), y.size(1), dtype=y.dtype, device="cuda")
    dist.all_to_all_single(back, y, w.send_splits, w.recv_splits)
    out = torch.zeros(w.x.shape, dtype=torch.float32, device="cuda")
    out.index_add_(0, w.send_token, back.float())
    return out.to(torch.bfloat16)


class BufferPath:
    """meshcomm.ep.Buffer or deep_ep.Buffer: the same DeepEP V1 calls."""

    def __init__(self, module, w, args):
        module.Buffer.set_num_sms(args.num_sms)
        self.buffer = module.Buffer(dist.group.WORLD, num_nvl_bytes=args.nvl_bytes, explicitly_destroy=True)
        self.config = module.Config(args.num_sms, 8, 256)
        self.w = w
        per_rank, _, per_expert, in_rank, _ = self.buffer.get_dispatch_layout(w.topk_idx, w.experts)
        self.layout = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
        self.fp8 = per_token_fp8(w.x)

    def dispatch(self, x):
        return self.buffer.dispatch(x, topk_idx=self.w.topk_idx, topk_weights=self.w.topk_weights,
                                    config=self.config, **self.layout)

    def combine(self, y, handle):
        return self.buffer.combine(y, handle, config=self.config)[0]


def import_deepep():
    try:
        import deep_ep
    except ImportError as e:
        return None, f"deep_ep is not importable ({e})"
    if os.path.abspath(deep_ep.__file__).startswith(os.path.abspath(meshcomm.ep.compat_path())):
        return None, "deep_ep is meshcomm's compatibility package, not DeepEP"
    return deep_ep, None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--num-sms", type=int, default=24)
    p.add_argument("--nvl-bytes", type=int, default=int(2e9))
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--deepep", action="store_true", help="also run DeepEP V1 (deep_ep must be importable)")
    p.add_argument("--low-latency", action="store_true", help="also time the low-latency mode")
    p.add_argument("--ll-tokens", type=int, default=128)
    p.add_argument("--ll-experts", type=int, default=288)
    p.add_argument("--json")
    args = p.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("cpu:gloo,cuda:nccl", device_id=torch.device("cuda", local_rank))
    rank, n = dist.get_rank(), dist.get_world_size()
    w = Workload(args, rank, n)

    paths = {"meshcomm": meshcomm.ep}
    if args.deepep:
        deep_ep, why = import_deepep()
        if deep_ep is None:
            sys.exit(f"--deepep: {why}")
        paths["deepep"] = deep_ep

    reference_recv = nccl_dispatch(w)
    reference_combined = nccl_combine(w, reference_recv)
    bf16_bytes = w.recv_rows * args.hidden * 2
    fp8_bytes = w.recv_rows * (args.hidden + args.hidden // 128 * 4)
    rows = [{"path": "nccl", "dispatch_bf16_us": timed(lambda: nccl_dispatch(w), args.warmup, args.iters),
             "combine_us": timed(lambda: nccl_combine(w, reference_recv), args.warmup, args.iters),
             "ok": True}]
    wrong = 0
    for name, module in paths.items():
        path = BufferPath(module, w, args)
        recv_x, _, _, _, handle, _ = path.dispatch(w.x)
        combined = path.combine(recv_x, handle)
        ok = bool(torch.equal(recv_x, reference_recv)) and calc_diff(combined, reference_combined) < 5e-6
        flags = torch.tensor([0 if ok else 1], device="cuda")
        dist.all_reduce(flags)
        wrong += int(flags.item())
        rows.append({"path": name, "ok": flags.item() == 0,
                     "dispatch_bf16_us": timed(lambda: path.dispatch(w.x), args.warmup, args.iters),
                     "dispatch_fp8_us": timed(lambda: path.dispatch(path.fp8), args.warmup, args.iters),
                     "combine_us": timed(lambda: path.combine(recv_x, handle), args.warmup, args.iters)})
        path.buffer.destroy()
    if rank == 0:
        mine = rows[1]
        print(f"# EP dispatch/combine, {n} ranks, {torch.cuda.get_device_name()}: {args.tokens} tokens x {args.hidden}"
              f" bf16, top-{args.topk} of {args.experts} experts; us per call (slowest rank), GB/s as DeepEP counts "
              f"(rank 0's received bytes / time); ratio = path time / meshcomm time")
        print("| path | dispatch bf16 us | GB/s | ratio | dispatch fp8 us | GB/s | ratio | combine us | GB/s | ratio | ok |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            cells = [r["path"]]
            for key, nbytes in (("dispatch_bf16_us", bf16_bytes), ("dispatch_fp8_us", fp8_bytes),
                                ("combine_us", bf16_bytes)):
                if key in r:
                    cells += [f"{r[key]:.1f}", f"{nbytes / r[key] / 1e3:.1f}", f"{r[key] / mine[key]:.2f}"]
                else:
                    cells += ["-", "-", "-"]
            cells.append("yes" if r["ok"] else "NO")
            print("| " + " | ".join(cells) + " |")
        print(f"\n{wrong} wrong")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**run_metadata(n), "args": vars(args), "recv_rows_rank0": w.recv_rows, "rows": rows}, f,
                          indent=1)
    if args.low_latency:
        low_latency = low_latency_rows(args, rank, n)
        wrong += sum(0 if r["ok"] else 1 for r in low_latency)
        if rank == 0:
            print(f"\n# low-latency mode: {args.ll_tokens} tokens x {args.hidden}, top-{args.topk} of {args.ll_experts}"
                  " experts; us per call (slowest rank); ratio = NCCL time / meshcomm time")
            print("| path | dispatch us | combine us | dispatch+combine us | ratio | ok |")
            print("|---|---|---|---|---|---|")
            mine = low_latency[0]["both_us"]
            for r in low_latency:
                print(f"| {r['path']} | {r['dispatch_us']:.1f} | {r['combine_us']:.1f} | {r['both_us']:.1f} | "
                      f"{r['both_us'] / mine:.2f} | {'yes' if r['ok'] else 'NO'} |")
            print(f"\n{wrong} wrong")
            if args.json:
                with open(args.json) as f:
                    saved = json.load(f)
                saved["low_latency_rows"] = low_latency
                with open(args.json, "w") as f:
                    json.dump(saved, f, indent=1)
    dist.destroy_process_group()
    sys.exit(1 if wrong else 0)


def low_latency_rows(args, rank, n):
    """meshcomm's low-latency dispatch (FP8) and combine against NCCL's all_to_all_single path, one shape."""
    ll_args = argparse.Namespace(**{**vars(args), "tokens": args.ll_tokens, "experts": args.ll_experts})
    w = Workload(ll_args, rank, n)
    M, E = args.ll_tokens, args.ll_experts
    size = meshcomm.ep.Buffer.get_low_latency_rdma_size_hint(M, args.hidden, n, E)
    buf = meshcomm.ep.Buffer(dist.group.WORLD, num_rdma_bytes=size, low_latency_mode=True, explicitly_destroy=True)

    def dispatch(fp8=True):
        return buf.low_latency_dispatch(w.x, w.topk_idx, M, E, use_fp8=fp8)

    # Check: BF16 rows sent back unchanged combine to x times the sum of the token's weights.
    recv_x, _, handle, _, _ = dispatch(fp8=False)
    combined = buf.low_latency_combine(recv_x, w.topk_idx, w.topk_weights, handle)[0]
    ok = calc_diff(combined, w.x.float() * w.topk_weights.sum(1, keepdim=True)) < 1e-5
    flags = torch.tensor([0 if ok else 1], device="cuda")
    dist.all_reduce(flags)
    y = recv_x
    rows = [{"path": "meshcomm", "ok": flags.item() == 0,
             "dispatch_us": timed(lambda: dispatch(), args.warmup, args.iters),
             "combine_us": timed(lambda: buf.low_latency_combine(y, w.topk_idx, w.topk_weights, handle), args.warmup,
                                 args.iters),
             "both_us": timed(lambda: buf.low_latency_combine(y, w.topk_idx, w.topk_weights, dispatch()[2]),
                              args.warmup, args.iters)}]
    buf.destroy()
    reference = nccl_dispatch(w)
    rows.append({"path": "nccl", "ok": True,
                 "dispatch_us": timed(lambda: nccl_dispatch(w), args.warmup, args.iters),
                 "combine_us": timed(lambda: nccl_combine(w, reference), args.warmup, args.iters),
                 "both_us": timed(lambda: nccl_combine(w, nccl_dispatch(w)), args.warmup, args.iters)})
    return rows


if __name__ == "__main__":
    main()
