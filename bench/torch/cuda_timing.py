"""Time per call of a CUDA workload on this rank: warm-up calls, then CUDA events around a run of calls on the
current stream. Benchmarks take the slowest rank's value with their own collective."""
import torch


def time_per_call_us(call, warmup, iters):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        call()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / iters
