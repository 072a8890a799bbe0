"""Fixtures of the torch backend tests (docs/torch.md). The c10d tests need torch, CUDA and a torchrun
launch (one process per GPU):

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torch

Without them every test is skipped with the reason. Every rank runs the same tests in the same order (the
collectives pair up across processes); data is seeded per (test, rank), so each rank computes the reference
of every collective on the host from all ranks' inputs."""

import os
from datetime import timedelta

import pytest
from torch_env import import_torch


class World:
    """The default process group of the session: 'cpu:gloo,cuda:meshcomm', bound to this rank's GPU."""

    def __init__(self, torch, dist, rank, size, device):
        self.torch, self.dist, self.rank, self.size, self.device = torch, dist, rank, size, device


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
    dist.destroy_process_group()
