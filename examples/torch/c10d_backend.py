"""torch.distributed on meshcomm: one allreduce, an all_to_all_single with device split sizes, one DDP step.

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> examples/torch/c10d_backend.py

(docs/torch.md). Prints one line per rank and "ok" on rank 0.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import meshcomm.torch as mt  # registers the backend "meshcomm"


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)  # the backend's Comm lives on the current device
    device = torch.device("cuda", local_rank)
    dist.init_process_group("cpu:gloo,cuda:meshcomm", device_id=device)
    rank, size = dist.get_rank(), dist.get_world_size()

    # allreduce: CUDA tensors go to meshcomm (CPU tensors would go to gloo).
    x = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(x)
    assert x[0].item() == size * (size + 1) / 2

    # all_to_all_single with split sizes living on the GPU (e.g. computed by an MoE router): no host sync.
    send_splits = torch.tensor([(rank + p) % 3 + 1 for p in range(size)], device=device)
    recv_splits = torch.empty_like(send_splits)
    dist.all_to_all_single(recv_splits, send_splits)  # every rank learns what it will receive (equal splits)
    tokens = torch.full((int(send_splits.sum()), 8), float(rank), device=device)
    received = torch.empty((int(recv_splits.sum()), 8), device=device)  # sizing needs the total once
    mt.all_to_all_single(received, tokens, recv_splits, send_splits)
    # The rows from peer p carry p's rank.
    expected = torch.cat([torch.full((int(n), 8), float(p), device=device) for p, n in enumerate(recv_splits)])
    assert torch.equal(received, expected)

    # One DDP step: gradients are averaged over the ranks by meshcomm allreduces.
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 4).to(device), device_ids=[local_rank])
    model(torch.randn(16, 32, device=device)).sum().backward()
    print(f"rank {rank}/{size}: allreduce, all_to_all_single and a DDP step on meshcomm", flush=True)

    dist.barrier(device_ids=[local_rank])
    if rank == 0:
        print("ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
