"""A collective written in Python with meshcomm.dsl, compiled to a plan and run on torch tensors (docs/dsl.md):
an allgather in which every rank puts its part straight into every peer's output and signals it.

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> examples/torch/dsl_algorithm.py

Prints one line per rank and "ok" on rank 0; exits 1 on a wrong result.
"""

import os
import sys

import torch

import meshcomm
from meshcomm import dsl


def my_allgather(num_ranks):
    """Rank r copies its input into its own output slot, puts it into every peer's slot r, then waits for all."""
    with dsl.CollectiveProgram("my_allgather", dsl.AllGather(num_ranks)) as program:
        channels = {r: {p: dsl.MemoryChannel(dst=p, src=r) for p in dsl.all_peers(r, num_ranks)}
                    for r in range(num_ranks)}
        for r in range(num_ranks):
            me = dsl.Rank(r)
            me.copy(me.output[r], me.input[0], tb=0)
            for p, ch in channels[r].items():
                ch.put(dsl.Rank(p).output[r], me.input[0], tb=0, signal=True)
            for ch in channels[r].values():
                ch.wait(tb=0)
    return program


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    stream = torch.cuda.current_stream().cuda_stream
    with meshcomm.Comm.from_env(device=local_rank) as comm:
        rank, n = comm.rank, comm.size
        algorithm = my_allgather(n).to_algorithm()  # compile (checks run here) and load
        comm.add_algorithm(algorithm)                 # every rank, the same plan
        part = torch.arange(1001, dtype=torch.float32, device=device) + 1000 * rank
        out = torch.full((n * part.numel(),), -1.0, dtype=torch.float32, device=device)
        # The plan writes into the peers' outputs: both buffers must be registered (zero-copy contract).
        regs = [comm.register_buffer(t.data_ptr(), t.numel() * t.element_size()) for t in (part, out)]
        algorithm.execute(comm, part.data_ptr(), out.data_ptr(), part.numel() * 4, out.numel() * 4,
                          meshcomm.to_data_type(torch.float32), stream=stream, executor=meshcomm.Executor(comm))
        torch.cuda.synchronize()
        for index in regs:
            comm.deregister_buffer(index)
        want = torch.cat([torch.arange(1001, dtype=torch.float32, device=device) + 1000 * r for r in range(n)])
        ok = torch.equal(out, want)
        print(f"rank {rank}/{n}: my_allgather of {part.numel()} floats per rank: {'ok' if ok else 'WRONG'}",
              flush=True)
        if rank == 0 and ok:
            print("ok")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
