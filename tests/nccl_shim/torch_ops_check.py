"""torch.distributed's NCCL backend on whatever libnccl is loaded (run with LD_PRELOAD=libmeshcomm_nccl.so to
test meshcomm's shim): every op the issue names, against results computed on the host from the inputs every
rank can regenerate (seeded per rank and per check: fresh random data for each check, outputs poisoned).

    torchrun --nproc_per_node 4 tests/nccl_shim/torch_ops_check.py [--expect-shim]

Exits non-zero on the first wrong result, naming the op, dtype, size and the worst element. --expect-shim
fails unless libmeshcomm_nccl is mapped into the process (so a silently ignored LD_PRELOAD cannot pass).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

CHECKS = 0


def rank_input(seed, rank, n, dtype, kind="any"):
    """The input of `rank` for check `seed`: the same bytes on every rank that asks."""
    g = torch.Generator().manual_seed(seed * 1000003 + rank)
    if dtype.is_floating_point:
        lo, hi = (0.5, 1.5) if kind == "prod" else (-1.0, 1.0)
        return (torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)
    lo, hi = (-2, 3) if kind == "prod" else (-100, 100)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dtype)


def tolerance(dtype, terms):
    if dtype == torch.bfloat16:
        return 1e-2 * terms
    if dtype == torch.float16:
        return 2e-3 * terms
    if dtype == torch.float32:
        return 1e-5 * terms
    return 0.0


def expect_close(what, got, want, terms=1):
    got64 = got.detach().cpu().to(torch.float64)
    want64 = want.to(got.dtype).to(torch.float64)
    if got64.shape != want64.shape:
        raise AssertionError(f"{what}: shape {tuple(got64.shape)} != {tuple(want64.shape)}")
    tol = tolerance(got.dtype, terms)
    err = (got64 - want64).abs() - tol * (1 + want64.abs())
    if err.numel() and err.max().item() > 0:
        i = int(err.argmax())
        raise AssertionError(f"{what}: element {i} is {got64.flatten()[i].item()}, expected "
                             f"{want64.flatten()[i].item()} (tolerance {tol}); "
                             f"{int((err > 0).sum())} of {err.numel()} elements wrong")


def poisoned(n, dtype, dev):
    t = torch.empty(n, dtype=dtype, device=dev)
    t.fill_(-7 if not dtype.is_floating_point else float("nan"))
    return t


def next_seed():
    global CHECKS
    CHECKS += 1
    return CHECKS


REDUCERS = {
    dist.ReduceOp.SUM: lambda xs: sum(xs[1:], xs[0]),
    dist.ReduceOp.PRODUCT: lambda xs: torch.stack(xs).prod(0),
    dist.ReduceOp.MAX: lambda xs: torch.stack(xs).max(0).values,
    dist.ReduceOp.MIN: lambda xs: torch.stack(xs).min(0).values,
}


def reference(op, inputs, dtype):
    """Exact in float64 (floats) or int64 (integers: the cast back to `dtype` wraps as the GPU does)."""
    xs = [x.to(torch.float64 if dtype.is_floating_point else torch.int64) for x in inputs]
    if op == "avg":
        out = sum(xs[1:], xs[0]) / len(xs)
    elif op == "premul":
        out = sum(xs[1:], xs[0]) * 0.5
    else:
        out = REDUCERS[op](xs)
    return out


def torch_op(op, dtype):
    if op == "avg":
        return dist.ReduceOp.AVG
    if op == "premul":
        return dist._make_nccl_premul_sum(0.5)
    return op


def check_all_reduce(rank, world, dev, sizes):
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8):
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]
        if dtype.is_floating_point:
            ops += ["avg"]
        if dtype in (torch.float32, torch.float16):
            # bf16 is left out: ProcessGroupNCCL hands ncclRedOpCreatePreMulSum a float for a bf16 op, of
            # which NCCL (and meshcomm, byte for byte like NCCL) reads the first two bytes.
            ops += ["premul"]
        for op in ops:
            for n in sizes:
                seed = next_seed()
                kind = "prod" if op == dist.ReduceOp.PRODUCT else "any"

                def gen(r):
                    return rank_input(seed, r, n, dtype, kind)

                x = gen(rank).to(dev)
                dist.all_reduce(x, op=torch_op(op, dtype))
                want = reference(op, [gen(r) for r in range(world)], dtype).to(dtype)
                expect_close(f"all_reduce {op} {dtype} n={n}", x, want, terms=world)


def check_all_gather(rank, world, dev, sizes):
    for dtype in (torch.bfloat16, torch.float32, torch.int64):
        for n in sizes:
            seed = next_seed()
            x = rank_input(seed, rank, n, dtype).to(dev)
            out = poisoned(n * world, dtype, dev)
            dist.all_gather_into_tensor(out, x)
            want = torch.cat([rank_input(seed, r, n, dtype) for r in range(world)])
            expect_close(f"all_gather_into_tensor {dtype} n={n}", out, want)
            outs = [poisoned(n, dtype, dev) for _ in range(world)]
            dist.all_gather(outs, x)
            expect_close(f"all_gather(list) {dtype} n={n}", torch.cat(outs), want)


def check_reduce_scatter(rank, world, dev, sizes):
    for dtype in (torch.bfloat16, torch.float32, torch.int32):
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX] + (["avg"] if dtype.is_floating_point else [])
        for op in ops:
            for n in sizes:
                seed = next_seed()
                x = rank_input(seed, rank, n * world, dtype).to(dev)
                out = poisoned(n, dtype, dev)
                dist.reduce_scatter_tensor(out, x, op=torch_op(op, dtype))
                full = reference(op, [rank_input(seed, r, n * world, dtype) for r in range(world)], dtype)
                want = full[rank * n:(rank + 1) * n].to(dtype)
                expect_close(f"reduce_scatter_tensor {op} {dtype} n={n}", out, want, terms=world)
                outl = poisoned(n, dtype, dev)
                dist.reduce_scatter(outl, list(x.chunk(world)), op=torch_op(op, dtype))
                expect_close(f"reduce_scatter(list) {op} {dtype} n={n}", outl, want, terms=world)


def check_all_to_all(rank, world, dev, sizes):
    dtype = torch.bfloat16
    for n in sizes:
        seed = next_seed()
        x = rank_input(seed, rank, n * world, dtype).to(dev)
        out = poisoned(n * world, dtype, dev)
        dist.all_to_all_single(out, x)
        want = torch.cat([rank_input(seed, r, n * world, dtype)[rank * n:(rank + 1) * n] for r in range(world)])
        expect_close(f"all_to_all_single even n={n}", out, want)
    # uneven splits, changing every call (what MoE layers do), some empty
    for it in range(20):
        seed = next_seed()
        g = torch.Generator().manual_seed(seed)
        splits = torch.randint(0, 3000, (world, world), generator=g)
        if it % 5 == 0:
            splits[0, world - 1] = 0
        send = splits[rank].tolist()
        recv = splits[:, rank].tolist()
        x = rank_input(seed, rank, sum(send), torch.float32).to(dev)
        out = poisoned(sum(recv), torch.float32, dev)
        dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send)
        parts = []
        for r in range(world):
            xr = rank_input(seed, r, int(splits[r].sum()), torch.float32)
            off = int(splits[r, :rank].sum())
            parts.append(xr[off:off + int(splits[r, rank])])
        expect_close(f"all_to_all_single uneven it={it}", out, torch.cat(parts))
    n = 777
    seed = next_seed()
    ins = [rank_input(seed, rank * world + p, n, torch.float32).to(dev) for p in range(world)]
    outs = [poisoned(n, torch.float32, dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for p in range(world):
        expect_close(f"all_to_all(list) from {p}", outs[p], rank_input(seed, p * world + rank, n, torch.float32))


def check_rooted(rank, world, dev, sizes):
    for root in range(world):
        for n in sizes:
            seed = next_seed()
            x = rank_input(seed, rank, n, torch.bfloat16).to(dev) if rank == root else poisoned(n, torch.bfloat16, dev)
            dist.broadcast(x, src=root)
            expect_close(f"broadcast root={root} n={n}", x, rank_input(seed, root, n, torch.bfloat16))
            seed = next_seed()
            y = rank_input(seed, rank, n, torch.float32).to(dev)
            dist.reduce(y, dst=root, op=dist.ReduceOp.SUM)
            if rank == root:
                want = reference(dist.ReduceOp.SUM, [rank_input(seed, r, n, torch.float32) for r in range(world)],
                                 torch.float32)
                expect_close(f"reduce root={root} n={n}", y, want, terms=world)
        n = 4099
        seed = next_seed()
        x = rank_input(seed, rank, n, torch.float32).to(dev)
        gl = [poisoned(n, torch.float32, dev) for _ in range(world)] if rank == root else None
        dist.gather(x, gather_list=gl, dst=root)
        if rank == root:
            for r in range(world):
                expect_close(f"gather root={root} from {r}", gl[r], rank_input(seed, r, n, torch.float32))
        seed = next_seed()
        sl = [rank_input(seed, root * world + r, n, torch.float32).to(dev) for r in range(world)] if rank == root else None
        out = poisoned(n, torch.float32, dev)
        dist.scatter(out, scatter_list=sl, src=root)
        expect_close(f"scatter root={root}", out, rank_input(seed, root * world + rank, n, torch.float32))


def check_p2p(rank, world, dev, sizes):
    for n in sizes:
        seed = next_seed()
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        x = rank_input(seed, rank, n, torch.float32).to(dev)
        out = poisoned(n, torch.float32, dev)
        if rank % 2 == 0:
            dist.send(x, nxt)
            dist.recv(out, prv)
        else:
            dist.recv(out, prv)
            dist.send(x, nxt)
        expect_close(f"send/recv ring n={n}", out, rank_input(seed, prv, n, torch.float32))
        seed = next_seed()
        x = rank_input(seed, rank, n, torch.float32).to(dev)
        outs = {p: poisoned(n, torch.float32, dev) for p in range(world) if p != rank}
        ops = [dist.P2POp(dist.isend, x, p) for p in outs] + [dist.P2POp(dist.irecv, outs[p], p) for p in outs]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        for p, o in outs.items():
            expect_close(f"batch_isend_irecv from {p} n={n}", o, rank_input(seed, p, n, torch.float32))


def check_async_and_groups(rank, world, dev):
    seed = next_seed()
    xs = [rank_input(seed, rank * 10 + i, 5000 + i, torch.float32).to(dev) for i in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in works:
        w.wait()
    for i, x in enumerate(xs):
        want = reference(dist.ReduceOp.SUM, [rank_input(seed, r * 10 + i, 5000 + i, torch.float32)
                                             for r in range(world)], torch.float32)
        expect_close(f"async all_reduce {i}", x, want, terms=world)
    dist.barrier()
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        seed = next_seed()
        x = rank_input(seed, rank, 3000, torch.float32).to(dev)
        dist.all_reduce(x, group=sub)
        want = reference(dist.ReduceOp.SUM, [rank_input(seed, r, 3000, torch.float32) for r in (0, 1)],
                         torch.float32)
        expect_close("new_group([0,1]) all_reduce", x, want, terms=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect-shim", action="store_true")
    args = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)  # eager init: new_group goes through ncclCommSplit
    rank, world = dist.get_rank(), dist.get_world_size()
    shim = "libmeshcomm_nccl" in open("/proc/self/maps").read()
    if rank == 0:
        print(f"world {world}; libmeshcomm_nccl mapped: {shim}; torch {torch.__version__}; "
              f"nccl version {torch.cuda.nccl.version()}", flush=True)
    if args.expect_shim and not shim:
        print(f"rank {rank}: --expect-shim but libmeshcomm_nccl.so is not loaded (LD_PRELOAD?)", file=sys.stderr)
        return 2
    sizes = [1, 3, 1023, 4096 * 257 + 5, 1 << 22]
    try:
        check_all_reduce(rank, world, dev, sizes)
        check_all_gather(rank, world, dev, sizes)
        check_reduce_scatter(rank, world, dev, [1, 1023, 1 << 20])
        check_all_to_all(rank, world, dev, [1, 1000, 1 << 18])
        check_rooted(rank, world, dev, [1, 1023, 1 << 20])
        check_p2p(rank, world, dev, [1, 1023, 1 << 20])
        check_async_and_groups(rank, world, dev)
        torch.cuda.synchronize()
        dist.barrier()
    except AssertionError as e:
        print(f"rank {rank}: WRONG: {e}", file=sys.stderr, flush=True)
        os._exit(1)  # peers may be blocked in a collective
    if rank == 0:
        print(f"torch_ops_check: {CHECKS} checks passed on {world} ranks", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
