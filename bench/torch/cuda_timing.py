"""Time per call of a CUDA workload on this rank: warm-up calls, then CUDA events around a run of calls, either
launched one by one (eager: the host's launch path included) or captured once into a CUDA graph and replayed
(graph: GPU time alone). Benchmarks take the slowest rank's value with their own collective."""
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


def graph_time_per_call_us(call, iters, replays=3):
    """call(stream): enqueues one call on `stream` (a cudaStream_t as an int). `iters` calls are captured into
    one CUDA graph on a side stream; after a warm-up replay, CUDA events time `replays` replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        for _ in range(iters):
            call(side.cuda_stream)
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / (replays * iters)
