"""One rank of the torch watchdog checks (test_torch_watchdog.py; docs/torch.md "Watchdog"), started by
rank_launcher with torchrun's variables. Rank 0 issues an allreduce on a watched subgroup that rank 1 never
joins; its watchdog must find the failure and handle it as MESHCOMM_TORCH_ASYNC_ERROR_HANDLING says:
  async-timeout: an async op past the group's 3 s timeout (mode 2: the group is aborted, later use raises);
  device-error:  a blocking op (no end event) whose device wait times out (MESHCOMM_DEVICE_TIMEOUT_MS);
  teardown:      as async-timeout under the default mode 3: the watchdog takes rank 0's process down."""

import json
import os
import time
from datetime import timedelta

GROUP_TIMEOUT_S = {"async-timeout": 3, "device-error": 120, "teardown": 3}


def run(rank, n, case):
    import torch
    import torch.distributed as dist

    import meshcomm.torch  # noqa: F401  registers the backend

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("cpu:gloo,cuda:meshcomm", device_id=device, timeout=timedelta(seconds=120))
    cpu = dist.new_group(backend="gloo")
    watched = dist.new_group(backend="meshcomm", timeout=timedelta(seconds=GROUP_TIMEOUT_S[case]))
    backend = watched._get_backend(device)
    x = torch.ones(1 << 12, device=device)
    dist.all_reduce(x, group=watched)  # warm-up on every rank: x's context exists, nothing host-side below
    torch.cuda.synchronize()
    result = {"case": case, "error_before": str(backend.get_error()), "failure_before": backend.failure}
    if rank == 0:
        start = time.monotonic()
        work = dist.all_reduce(x, group=watched, async_op=case != "device-error")  # rank 1 never joins
        while backend.failure is None and time.monotonic() - start < 60:  # what the watchdog recorded
            time.sleep(0.02)
        result["seconds"] = round(time.monotonic() - start, 2)
        result["error_after"] = str(backend.get_error())
        result["failure"] = backend.failure
        result["next_op"] = raised(lambda: dist.all_reduce(x, group=watched))
        if work is not None:
            result["wait"] = raised(work.wait)
    elif case == "teardown":
        time.sleep(15)  # rank 0 is taken down meanwhile; no collective with it any more
        print("RESULT " + json.dumps(result), flush=True)
        os._exit(0)
    dist.barrier(group=cpu)
    backend.abort()  # every rank aborts a failed group (no teardown agreement with a rank that aborted)
    dist.destroy_process_group()
    return result


def raised(call):
    try:
        call()
    except Exception as e:  # DistBackendError expected
        return f"{type(e).__name__}: {e}"
    return "no error"
