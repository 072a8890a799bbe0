"""Time per call of a CUDA workload on this rank: warm-up calls, then CUDA events around a run of calls, either
launched one by one (eager: the host's launch path included) or captured once into a CUDA graph and replayed
(graph: GPU time alone). Benchmarks take the slowest rank's value with their own collective."""
import torch


def _timed_run_us(warm_up, before_timing, run, count):
    """warm_up(), a synchronize, before_timing() (e.g. a barrier), then CUDA events around run() on the current
    stream: microseconds per each of the `count` calls run() enqueues."""
    warm_up()
    torch.cuda.synchronize()
    if before_timing is not None:
        before_timing()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / count


def time_per_call_us(call, warmup, iters, before_timing=None):
    """call(): enqueues one call on the current stream; `warmup` calls, then `iters` timed ones."""
    def repeat(times):
        for _ in range(times):
            call()
    return _timed_run_us(lambda: repeat(warmup), before_timing, lambda: repeat(iters), iters)


def graph_time_per_call_us(call, iters, replays=3, before_timing=None):
    """call(stream): enqueues one call on `stream`, a torch.cuda.Stream that is also the current stream while
    `iters` calls are captured into one CUDA graph; after a warm-up replay, `replays` replays are timed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        for _ in range(iters):
            call(side)

    def replay(times):
        for _ in range(times):
            graph.replay()
    return _timed_run_us(lambda: replay(1), before_timing, lambda: replay(replays), replays * iters)
