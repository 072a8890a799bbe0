"""A small transformer trained with DDP for a fixed number of steps on deterministic data; rank 0 writes the
per-step losses as JSON. Run it once on NCCL and once with LD_PRELOAD=libmeshcomm_nccl.so, then compare:

    torchrun --nproc_per_node 4 tests/nccl_shim/torch_ddp_losses.py --out nccl.json
    LD_PRELOAD=build/libmeshcomm_nccl.so torchrun --nproc_per_node 4 tests/nccl_shim/torch_ddp_losses.py \\
        --out meshcomm.json
    python3 tests/nccl_shim/torch_ddp_losses.py --compare nccl.json meshcomm.json --rtol 1e-3

The model is deterministic given the gradients (fixed seeds, deterministic algorithms), so the two runs
differ only by the reductions' rounding.
"""
import argparse
import json
import os
import sys
import time


def train(args):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(1234)  # same initial weights everywhere (DDP also broadcasts them from rank 0)
    vocab, d, seq, batch = 1000, 256, 64, 16
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True), 4),
        nn.Linear(d, vocab),
    ).cuda()
    ddp = DDP(model, device_ids=[local], bucket_cap_mb=4)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    losses, times = [], []
    for step in range(args.steps):
        x = torch.randint(0, vocab, (batch, seq), device="cuda", generator=g)
        y = torch.roll(x, 1, dims=1)  # learnable: predict the previous token
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = ddp(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(avg.item())
    maps = open("/proc/self/maps").read()
    if rank == 0:
        steady = sorted(times[5:])[len(times[5:]) // 2] if len(times) > 5 else times[-1]
        result = {"losses": losses, "median_step_s": steady, "world": world,
                  "libmeshcomm_nccl_mapped": "libmeshcomm_nccl" in maps, "torch": torch.__version__}
        with open(args.out, "w") as f:
            json.dump(result, f)
        print(f"ddp: {args.steps} steps on {world} ranks, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
              f"median step {steady * 1e3:.2f} ms, libmeshcomm_nccl mapped: {result['libmeshcomm_nccl_mapped']}",
              flush=True)
    dist.destroy_process_group()


def compare(a_path, b_path, rtol):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    if len(a["losses"]) != len(b["losses"]):
        print(f"different step counts: {len(a['losses'])} vs {len(b['losses'])}")
        return 1
    worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a["losses"], b["losses"]))
    print(f"{len(a['losses'])} steps: max relative loss difference {worst:.3e} (limit {rtol:g}); "
          f"median step {a['median_step_s'] * 1e3:.2f} ms ({a_path}) vs {b['median_step_s'] * 1e3:.2f} ms "
          f"({b_path}); shim mapped: {a['libmeshcomm_nccl_mapped']} / {b['libmeshcomm_nccl_mapped']}")
    return 0 if worst <= rtol else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--out", default="losses.json")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    ap.add_argument("--rtol", type=float, default=1e-3)
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, args.rtol)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
