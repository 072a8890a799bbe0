"""Fixtures of the torch backend tests (docs/torch.md). The c10d tests need torch, CUDA and a torchrun
launch (one process per GPU):

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torch

Without them every test is skipped with the reason. Every rank runs the same tests in the same order (the
collectives pair up across processes); data is seeded per (test, rank), so each rank computes the reference
of every collective on the host from all ranks' inputs."""

import os
import sys
from datetime import timedelta

import pytest
from torch_env import import_torch


class World:
    """The default process group of the session: 'cpu:gloo,cuda:meshcomm', bound to this rank's GPU."""

    def __init__(self, torch, dist, rank, size, device):
        self.torch, self.dist, self.rank, self.size, self.device = torch, dist, rank, size, device


_FAILED = []


def pytest_runtest_logreport(report):
    """Prints a failure at once, with the rank: the other ranks may be waiting inside that test's collective,
    so the run ends at the session teardown below, before pytest's summary."""
    if report.failed:
        _FAILED.append(report.nodeid)
        rank = os.environ.get("RANK", "?")
        print(f"\n[rank {rank}] FAILED {report.nodeid} ({report.when}):\n{report.longreprtext}", file=sys.stderr,
              flush=True)


@pytest.fixture(scope="session")
def world():
    torch, reason = import_torch()
    if torch is None:
        pytest.skip(reason)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
        pytest.skip("not launched by torchrun: run `torchrun --nproc-per-node=<GPUs> -m pytest tests/python/torch`")
    import torch.distributed as dist

    import meshcomm.torch  # noqa: F401  registers the backend; an ImportError here is a real failure

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("cpu:gloo,cuda:meshcomm", device_id=device, timeout=timedelta(seconds=300))
    yield World(torch, dist, dist.get_rank(), dist.get_world_size(), device)
    if _FAILED:
        # Peers may be blocked in the failed test's collective: a collective teardown would wait for them.
        # Exit now (torchrun then stops the other ranks); the failures were printed above.
        print(f"[rank {os.environ.get('RANK', '?')}] {len(_FAILED)} test(s) failed: {', '.join(_FAILED)}",
              file=sys.stderr, flush=True)
        os._exit(1)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ep(world):
    """meshcomm.ep (the EP tests), or a skip naming why it does not import."""
    try:
        import meshcomm.ep as ep
    except ImportError as e:
        pytest.skip(f"meshcomm.ep is not built here: {e}")
    return ep
