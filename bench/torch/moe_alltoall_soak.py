"""An MoE-style loop: all_to_all_single with split sizes that change every call, on the meshcomm c10d backend,
checked element by element and with GPU memory watched (the torch backend's acceptance).

    PYTHONPATH=<build>/python torchrun --nproc_per_node 4 bench/torch/moe_alltoall_soak.py [--iters 10000]

Every iteration draws a fresh split matrix S (S[src][dst] rows of `--hidden` int32 elements, 0 included) from
a generator seeded the same on every rank, so each rank knows what it must receive. Iterations rotate over
four ways of calling: torch.distributed.all_to_all_single with host split lists (sync and async_op) and
meshcomm.torch.all_to_all_single with split sizes in CUDA tensors (sync and async_op; no host sync). Then
`--graph-iters` replays of one CUDA graph that captured the device-split call, with new splits and data
written into its tensors before each replay. Outputs are poisoned before every call; a row's value encodes
(source rank, row in the source's buffer, iteration mod 3, column), so a misplaced, stale or missing row
counts as wrong. Wrong elements accumulate on the GPU (no host sync in the loop). Memory: the caching
allocator's reserved bytes (after empty_cache) and the driver's free bytes after a warm-up and at the end.
Exit 1 on any wrong element or memory growth.
"""
import argparse
import gc
import os
import sys
import time

import torch
import torch.distributed as dist

import meshcomm.torch as mt


def value_code(src, rows, iteration, hidden, device):
    """[len(rows), hidden] int32: the value source `src` puts in rows `rows` of its send buffer."""
    base = (src * 65536 + rows) * 4 + (iteration % 3)  # < 2^22 for 8 ranks x 2^13 rows
    cols = torch.arange(hidden, device=device, dtype=torch.int32)
    return base.to(torch.int32).unsqueeze(1) * hidden + cols


class Soak:
    def __init__(self, args, rank, world, device):
        self.args, self.rank, self.world, self.device = args, rank, world, device
        g = torch.Generator().manual_seed(args.seed)
        total = args.iters + args.graph_iters
        # S[i][src][dst]: rows src sends to dst in iteration i (the same tensor on every rank).
        self.splits = torch.randint(0, args.max_rows + 1, (total, world, world), generator=g)
        self.splits_gpu = self.splits.to(device)
        cap = world * args.max_rows
        self.send = torch.empty((cap, args.hidden), dtype=torch.int32, device=device)
        self.recv = torch.empty((cap, args.hidden), dtype=torch.int32, device=device)
        self.wrong = torch.zeros((), dtype=torch.int64, device=device)
        self.checked = 0

    def fill_send(self, i):
        """The send rows of iteration i: row r of this rank's buffer carries code(rank, r, i)."""
        n = int(self.splits[i][self.rank].sum())
        rows = torch.arange(n, device=self.device)
        self.send[:n] = value_code(self.rank, rows, i, self.args.hidden, self.device)
        self.recv.fill_(-1)  # poison
        return n

    def expected(self, i):
        """What this rank must hold after iteration i: from each source, its rows addressed to us, in order."""
        parts = []
        for src in range(self.world):
            row = self.splits[i][src]
            start = int(row[: self.rank].sum())
            count = int(row[self.rank])
            rows = torch.arange(start, start + count, device=self.device)
            parts.append(value_code(src, rows, i, self.args.hidden, self.device))
        return torch.cat(parts)

    def check(self, i, received_rows):
        want = self.expected(i)
        assert want.shape[0] == received_rows
        self.wrong += (self.recv[:received_rows] != want).sum()
        self.wrong += (self.recv[received_rows:] != -1).sum()  # nothing written past the received rows
        self.checked += self.recv.numel()

    def eager(self, i):
        n_send = self.fill_send(i)
        in_splits = self.splits[i][self.rank].tolist()
        out_splits = self.splits[i][:, self.rank].tolist()
        n_recv = sum(out_splits)
        way = i % 4
        async_op = way in (1, 3)
        if way < 2:  # torch.distributed with host split lists
            work = dist.all_to_all_single(self.recv[:n_recv], self.send[:n_send], out_splits, in_splits,
                                          async_op=async_op)
        else:  # split sizes in device tensors, sliced from the GPU copy of S: no host sync
            work = mt.all_to_all_single(self.recv, self.send, self.splits_gpu[i][:, self.rank],
                                        self.splits_gpu[i][self.rank], async_op=async_op)
        if async_op:
            work.wait()
        self.check(i, n_recv)

    def graph(self, first, count):
        in_splits = torch.empty(self.world, dtype=torch.int64, device=self.device)
        out_splits = torch.empty_like(in_splits)

        def stage(i):
            in_splits.copy_(self.splits_gpu[i][self.rank])
            out_splits.copy_(self.splits_gpu[i][:, self.rank])
            return self.fill_send(i)

        stage(first)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up before capture (torch's rule, and meshcomm's)
            mt.all_to_all_single(self.recv, self.send, out_splits, in_splits)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            mt.all_to_all_single(self.recv, self.send, out_splits, in_splits)
        for i in range(first, first + count):
            stage(i)
            g.replay()
            self.check(i, int(self.splits[i][:, self.rank].sum()))
        torch.cuda.synchronize()
        del g


def memory(device):
    """(torch reserved, torch allocated, driver free) bytes, with torch's cache emptied first: what remains
    reserved is live tensors and pools, so growth means something kept memory."""
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    return torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device), free


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=10000)
    ap.add_argument("--graph-iters", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=200, help="iterations before the first memory reading")
    ap.add_argument("--max-rows", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--free-slack-mib", type=float, default=0.0,
                    help="allowed drop of the driver's free memory between the readings")
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("cpu:gloo,cuda:meshcomm", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    soak = Soak(args, rank, world, device)

    for i in range(args.warmup):
        soak.eager(i)
    before = memory(device)
    t0 = time.perf_counter()
    for i in range(args.warmup, args.iters):
        soak.eager(i)
    soak.graph(args.iters, args.graph_iters)
    seconds = time.perf_counter() - t0
    after = memory(device)
    wrong = int(soak.wrong.item())

    mib = 1 << 20
    grew_reserved = after[0] - before[0]
    free_drop = before[2] - after[2]
    ok = wrong == 0 and grew_reserved <= 0 and free_drop <= args.free_slack_mib * mib
    print(f"rank {rank}/{world}: {args.iters} eager calls (host/device splits, sync/async) + {args.graph_iters} "
          f"graph replays in {seconds:.1f} s, {soak.checked} elements checked, {wrong} wrong; "
          f"torch reserved {before[0] / mib:.1f} -> {after[0] / mib:.1f} MiB, allocated "
          f"{before[1] / mib:.1f} -> {after[1] / mib:.1f} MiB, cudaMemGetInfo free {before[2] / mib:.1f} -> "
          f"{after[2] / mib:.1f} MiB: {'PASS' if ok else 'FAIL'}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
