"""meshcomm by hand on torch tensors (no torch.distributed backend): a Comm from the launcher's environment,
the default algorithm collection, Algorithm.execute and Comm calls on tensor pointers, and a GpuBuffer
shared with torch through DLPack.

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> examples/torch/algorithm_execute.py

(docs/python.md). Prints one line per rank and "ok" on rank 0; exits 1 on a wrong result.
"""

import os
import sys

import torch

import meshcomm


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    stream = torch.cuda.current_stream()
    with meshcomm.Comm.from_env(device=local_rank) as comm:  # MASTER_ADDR/PORT, RANK, WORLD_SIZE
        rank, n = comm.rank, comm.size
        bf16 = meshcomm.to_data_type(torch.bfloat16)

        # 1. The selector's choice: comm.all_reduce on the tensor's memory, on torch's current stream.
        x = torch.full((1 << 20,), float(rank + 1), dtype=torch.bfloat16, device=device)
        comm.all_reduce(x.data_ptr(), x.data_ptr(), x.numel(), bf16, stream=stream.cuda_stream)
        expected = n * (n + 1) / 2

        # 2. A named algorithm of the default collection, run through Algorithm.execute (sizes in bytes).
        algorithms = meshcomm.build_default_algorithms()
        allgather = algorithms["allgather_ll"]
        part = torch.full((4096,), float(rank), dtype=torch.bfloat16, device=device)
        gathered = torch.full((n * part.numel(),), -1.0, dtype=torch.bfloat16, device=device)
        allgather.execute(comm, part.data_ptr(), gathered.data_ptr(), part.numel() * 2, gathered.numel() * 2, bf16,
                          stream=stream.cuda_stream)

        # 3. meshcomm-owned memory seen by torch without a copy (DLPack), reduced in place.
        buf = meshcomm.GpuBuffer(4 * 1024, device=local_rank)
        view = torch.from_dlpack(buf).view(torch.float32)  # 1024 float32 on the same bytes
        view.fill_(float(rank))
        f32 = meshcomm.to_data_type(torch.float32)
        comm.all_reduce(buf.ptr, buf.ptr, view.numel(), f32, op=meshcomm.ReduceOp.MAX, stream=stream.cuda_stream)
        torch.cuda.synchronize()

        ok = bool((x == expected).all()) and bool((view == n - 1).all())
        ok = ok and all(bool((gathered[r * part.numel():(r + 1) * part.numel()] == r).all()) for r in range(n))
        print(f"rank {rank}/{n}: allreduce {x[0].item()} (expected {expected}), allgather_ll rows 0..{n - 1}, "
              f"DLPack max {view[0].item()}: {'ok' if ok else 'WRONG'}", flush=True)
        comm.barrier(stream=stream.cuda_stream)
        torch.cuda.synchronize()
    if rank == 0 and ok:
        print("ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
