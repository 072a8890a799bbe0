"""A small transformer trained data-parallel (DDP or FSDP2) for a fixed number of steps on deterministic data;
rank 0 writes the per-step losses and step times as JSON. Run it once per communication stack, then compare:

    torchrun --nproc_per_node 4 bench/torch/train_losses.py --backend nccl --out nccl.json
    # meshcomm's c10d backend (PYTHONPATH=<build>/python):
    torchrun --nproc_per_node 4 bench/torch/train_losses.py --backend meshcomm --out meshcomm.json
    # or NCCL's API on meshcomm (the shim):
    LD_PRELOAD=build/libmeshcomm_nccl.so torchrun --nproc_per_node 4 bench/torch/train_losses.py \\
        --backend nccl --expect-shim --out shim.json
    python3 bench/torch/train_losses.py --compare nccl.json meshcomm.json --rtol 1e-3 [--max-time-ratio 1.0]
    # repeated runs (alternate the stacks): --compare nccl1.json,nccl2.json,nccl3.json m1.json,m2.json,m3.json
    # both stacks in one process, taking turns step by step (a paired step-time comparison):
    torchrun --nproc_per_node 4 bench/torch/train_losses.py --paired --out nccl.json --out-b meshcomm.json

--parallel fsdp2 shards every encoder layer and the root with torch.distributed.fsdp.fully_shard (all-gather
of parameters, reduce-scatter of gradients) instead of DDP (bucketed allreduces). The model is deterministic
given the gradients (fixed seeds, deterministic algorithms), so two runs differ only by the reductions'
rounding. Step time: the median over the steps after the first five (each step ends with a device sync).

--paired: the step of this small model is host-bound, and the host's speed drifts by +-10% between processes
(and runs), which decided separate-process comparisons either way. Paired runs build the model twice in one
process (same seed), wrap one over a ProcessGroupNCCL group and one over a cuda:meshcomm group, and step them
in turns on the same batches, the order alternating every step; each stack's file gets its own losses and
step times, so --compare applies unchanged, and the median of the per-step time ratios is recorded too.
"""
import argparse
import json
import os
import sys
import time


def build_model(torch, vocab, d):
    nn = torch.nn
    return nn.Sequential(
        nn.Embedding(vocab, d),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True), 4,
                              enable_nested_tensor=False),
        nn.Linear(d, vocab),
    ).cuda()


def wrap(torch, model, parallel, local, group=None):
    """DDP or FSDP2 over `group` (None: the default group)."""
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[local], bucket_cap_mb=4, process_group=group)
    from torch.distributed.fsdp import fully_shard

    mesh = None
    if group is not None:
        from torch.distributed.device_mesh import DeviceMesh

        mesh = DeviceMesh.from_group(group, "cuda")
    for layer in model[1].layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def init_distributed(torch, dist, backend, torchcomms=False):
    """This rank's GPU (LOCAL_RANK) and the default group with `backend` for CUDA tensors (gloo for CPU ones);
    returns (local rank, rank, world size). With `torchcomms`, torch.distributed routes every group through
    torchcomms (torch.distributed.config.use_torchcomms; docs/torchcomms.md) and the world is CUDA-only:
    under that routing torch 2.11 builds CPU groups with torchcomms' gloo backend, which cannot form subgroups."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    if torchcomms:
        import torch.distributed.config as dist_config

        dist_config.use_torchcomms = True
        dist.init_process_group(f"cuda:{backend}", device_id=device)
        return local, dist.get_rank(), dist.get_world_size()
    if backend == "meshcomm":
        import meshcomm.torch  # noqa: F401  registers the backend
    dist.init_process_group(f"cpu:gloo,cuda:{backend}", device_id=device)
    return local, dist.get_rank(), dist.get_world_size()


def batch_of(torch, g, vocab, batch, seq):
    """Random tokens and a learnable target: predict the previous token."""
    x = torch.randint(0, vocab, (batch, seq), device="cuda", generator=g)
    return x, torch.roll(x, 1, dims=1)


def timed_step(torch, dist, step, x, y, group=None):
    """One training step (step(x, y) returns this rank's loss after its optimizer step) and the loss averaged
    over `group`: (that loss, seconds from a synced start to the end of the step, device synced)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = step(x, y)
    avg = loss.detach().clone()
    dist.all_reduce(avg, op=dist.ReduceOp.AVG, group=group)
    torch.cuda.synchronize()
    return avg.item(), time.perf_counter() - t0


def timed_steps(torch, dist, steps, next_batch, step):
    """Runs `steps` training steps; returns the losses averaged over all ranks and the seconds of each step."""
    losses, times = [], []
    for _ in range(steps):
        loss, t = timed_step(torch, dist, step, *next_batch())
        losses.append(loss)
        times.append(t)
    return losses, times


def report(torch, args, parallel, rank, world, losses, times, backend=None, out=None, **extra):
    """Rank 0 writes the JSON of a run (label parallel/backend, losses, median step time, `extra`) to `out`
    (default --out) and prints its summary line; every rank checks --expect-shim."""
    backend = backend or args.backend
    out = out or args.out
    shim = "libmeshcomm_nccl" in open("/proc/self/maps").read()
    if args.expect_shim and not shim:
        raise SystemExit(f"rank {rank}: --expect-shim: libmeshcomm_nccl is not mapped (LD_PRELOAD ignored?)")
    if rank != 0:
        return
    steady = sorted(times[5:])[len(times[5:]) // 2] if len(times) > 5 else times[-1]
    label = f"{parallel}/{backend}{' (shim)' if shim else ''}{' (paired)' if getattr(args, 'paired', False) else ''}"
    result = {"label": label, "parallel": parallel, "backend": backend, "losses": losses,
              "median_step_s": steady, "world": world, "libmeshcomm_nccl_mapped": shim,
              "torch": torch.__version__, **extra}
    with open(out, "w") as f:
        json.dump(result, f)
    print(f"{label}: {len(losses)} steps on {world} ranks, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"median step {steady * 1e3:.2f} ms", flush=True)


VOCAB, D, SEQ, BATCH = 1000, 256, 64, 16


def make_step(torch, parallel, local, group=None):
    """A fresh model (seed 1234: the same initial weights everywhere and in every call; DDP also broadcasts
    them from rank 0), wrapped over `group`, with its optimizer: returns step(x, y) -> this rank's loss."""
    torch.manual_seed(1234)
    model = wrap(torch, build_model(torch, VOCAB, D), parallel, local, group)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def train(args):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch
    import torch.distributed as dist

    if args.paired:
        return train_paired(torch, dist, args)
    local, rank, world = init_distributed(torch, dist, args.backend)
    torch.use_deterministic_algorithms(True, warn_only=True)
    step = make_step(torch, args.parallel, local)
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    losses, times = timed_steps(torch, dist, args.steps, lambda: batch_of(torch, g, VOCAB, BATCH, SEQ), step)
    report(torch, args, args.parallel, rank, world, losses, times)
    dist.destroy_process_group()


def train_paired(torch, dist, args):
    """--paired: NCCL and meshcomm in one process, stepping in turns on the same batches (see the top)."""
    import meshcomm.torch  # noqa: F401  registers the backend

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    # No device_id: with a device-bound default group, torch builds every NCCL group by splitting the default
    # group's CUDA backend, assuming it is NCCL (docs/torch.md, Limits).
    dist.init_process_group("cpu:gloo,cuda:meshcomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.use_deterministic_algorithms(True, warn_only=True)
    groups = {"nccl": dist.new_group(backend="nccl"), "meshcomm": dist.group.WORLD}
    steps = {name: make_step(torch, args.parallel, local, group) for name, group in groups.items()}
    losses = {name: [] for name in groups}
    times = {name: [] for name in groups}
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    order = list(groups)
    for k in range(args.steps):
        x, y = batch_of(torch, g, VOCAB, BATCH, SEQ)
        for name in order if k % 2 == 0 else order[::-1]:
            loss, t = timed_step(torch, dist, steps[name], x, y, groups[name])
            losses[name].append(loss)
            times[name].append(t)
    ratios = sorted(b / a for a, b in zip(times["nccl"][5:], times["meshcomm"][5:]))
    paired = {"paired_median_step_ratio": ratios[len(ratios) // 2] if ratios else None}
    report(torch, args, args.parallel, rank, world, losses["nccl"], times["nccl"], "nccl", args.out, **paired)
    report(torch, args, args.parallel, rank, world, losses["meshcomm"], times["meshcomm"], "meshcomm",
           args.out_b, **paired)
    if rank == 0:
        print(f"{args.parallel} paired: median of the per-step ratios meshcomm/nccl "
              f"{paired['paired_median_step_ratio']:.3f}", flush=True)
    dist.destroy_process_group()


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def compare(a_spec, b_spec, rtol, max_time_ratio):
    """0 when b's losses are within rtol of a's (and, with max_time_ratio, b's step time <= ratio * a's).

    a_spec and b_spec are result files, or comma-separated lists of them (repeated runs, e.g. alternated
    A, B, A, B, ...): every run's losses must be within rtol of a's first run, and the step time of a side is
    the median of its runs' median step times (the step of this small model is host-bound and moves by
    +-10% between processes, on either stack)."""
    runs_a = [json.load(open(p)) for p in a_spec.split(",")]
    runs_b = [json.load(open(p)) for p in b_spec.split(",")]
    ref = runs_a[0]["losses"]
    worst = 0.0
    for r in runs_a[1:] + runs_b:
        if len(r["losses"]) != len(ref):
            print(f"different step counts: {len(ref)} vs {len(r['losses'])}")
            return 1
        worst = max([worst] + [abs(x - y) / max(abs(x), 1e-12) for x, y in zip(ref, r["losses"])])
    ta = median([r["median_step_s"] for r in runs_a])
    tb = median([r["median_step_s"] for r in runs_b])
    ratio = tb / ta
    la, lb = runs_a[0].get("label", a_spec), runs_b[0].get("label", b_spec)
    each = ""
    if len(runs_a) > 1 or len(runs_b) > 1:
        fmt = lambda rs: "/".join(f"{r['median_step_s'] * 1e3:.2f}" for r in rs)  # noqa: E731
        each = f" [runs: {fmt(runs_a)} vs {fmt(runs_b)} ms; median of {len(runs_a)} and {len(runs_b)} runs]"
    print(f"{len(ref)} steps: max relative loss difference {worst:.3e} (limit {rtol:g}); "
          f"median step {ta * 1e3:.2f} ms ({la}) vs {tb * 1e3:.2f} ms ({lb}), "
          f"ratio {ratio:.3f}" + (f" (limit {max_time_ratio:g})" if max_time_ratio else "") + each)
    ok = worst <= rtol and (not max_time_ratio or ratio <= max_time_ratio)
    return 0 if ok else 1


def add_run_arguments(ap):
    """The options every loss check shares: the run (steps, backend, --expect-shim, --out) and --compare."""
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--backend", default="nccl", help="c10d backend of the CUDA tensors: nccl or meshcomm")
    ap.add_argument("--torchcomms", action="store_true",
                    help="route torch.distributed through torchcomms (the backend is then torchcomms' one)")
    ap.add_argument("--expect-shim", action="store_true", help="fail unless libmeshcomm_nccl is mapped")
    ap.add_argument("--out", default="losses.json")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"),
                    help="compare result files (or comma-separated lists of repeated runs' files)")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--max-time-ratio", type=float, default=0.0,
                    help="with --compare: fail when B's median step time exceeds this multiple of A's")


def main():
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    ap.add_argument("--parallel", choices=["ddp", "fsdp2"], default="ddp")
    ap.add_argument("--paired", action="store_true",
                    help="run NCCL and meshcomm in this one process, in turns (--out: NCCL, --out-b: meshcomm)")
    ap.add_argument("--out-b", default="losses_meshcomm.json", help="--paired: meshcomm's result file")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare, args.rtol, args.max_time_ratio)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
