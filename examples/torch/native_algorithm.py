"""Your own algorithm in CUDA, compiled at run time and run on torch tensors: compile_native builds
native_allreduce.cu (next to this file) against the installed meshcomm headers, registers it on the Comm
and Algorithm.execute runs it; the result is checked against the built-in allreduce's.

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> examples/torch/native_algorithm.py

(docs/native.md). Prints one line per rank and "ok" on rank 0; exits 1 on a wrong result.
"""

import os
import sys
import time
from pathlib import Path

import torch

import meshcomm


def timed(stream, fn, iters=200):
    """Mean microseconds per call of fn on `stream` (after a warm-up)."""
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(iters):
        fn()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    stream = torch.cuda.current_stream()
    with meshcomm.Comm.from_env(device=local_rank) as comm:
        rank, n = comm.rank, comm.size
        source = Path(__file__).resolve().parent / "native_allreduce.cu"
        started = time.perf_counter()
        # Collective: every rank registers it (the ranks of a node share one build through the cache).
        mine = meshcomm.compile_native("my_oneshot_allreduce", source, comm=comm)
        built_s = time.perf_counter() - started

        ok = True
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(8192, dtype=dtype, device=device, generator=torch.Generator(device=device).manual_seed(rank))
            ours, theirs = torch.full_like(x, float("nan")), x.clone()
            nbytes = x.numel() * x.element_size()
            dt = meshcomm.to_data_type(dtype)
            mine.execute(comm, x.data_ptr(), ours.data_ptr(), nbytes, nbytes, dt, stream=stream.cuda_stream)
            comm.all_reduce(theirs.data_ptr(), theirs.data_ptr(), theirs.numel(), dt, stream=stream.cuda_stream)
            torch.cuda.synchronize()
            # Both reduce in rank order and round once: bit-identical results.
            ok = ok and torch.equal(ours, theirs)

        x = torch.randn(8192, device=device)
        out = torch.empty_like(x)
        f32 = meshcomm.to_data_type(torch.float32)
        us_mine = timed(stream, lambda: mine.execute(comm, x.data_ptr(), out.data_ptr(), 4 * x.numel(), 4 * x.numel(),
                                                     f32, stream=stream.cuda_stream))
        us_builtin = timed(stream, lambda: comm.all_reduce(x.data_ptr(), out.data_ptr(), x.numel(), f32,
                                                           stream=stream.cuda_stream))
        print(f"rank {rank}/{n}: {mine.name} from {Path(mine.library_path).name} (ready in {built_s:.1f} s): "
              f"{'ok' if ok else 'WRONG'}; 32 KiB f32: {us_mine:.1f} us/call vs built-in selection "
              f"{us_builtin:.1f} us", flush=True)
        comm.barrier(stream=stream.cuda_stream)
        torch.cuda.synchronize()
    if rank == 0 and ok:
        print("ok")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
