"""Fixtures of the torchcomms backend tests (docs/torchcomms.md). They need torch, CUDA, an installed
torchcomms (with its NCCL backend), meshcomm built with its torchcomms backend, and a torchrun launch:

    PYTHONPATH=<build>/python torchrun --nproc-per-node=<GPUs> -m pytest -q tests/python/torchcomms

Without them every test is skipped with the reason. Every rank runs the same tests in the same order. Each
op runs on a meshcomm communicator and on an NCCL one in the same process (mixed backends) on the same
seeded inputs: the two results must be identical, and equal to a host reference."""

import os
import sys
import zlib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "torch"))
from torch_env import import_torch  # noqa: E402  (tests/python/torch/torch_env.py)

_FAILED = []


def pytest_runtest_logreport(report):
    """Prints a failure at once, with the rank (the other ranks may wait inside that test's collective)."""
    if report.failed:
        _FAILED.append(report.nodeid)
        rank = os.environ.get("RANK", "?")
        print(f"\n[rank {rank}] FAILED {report.nodeid} ({report.when}):\n{report.longreprtext}", file=sys.stderr,
              flush=True)


class Comms:
    """The session's communicators: `mesh` (meshcomm) and `nccl` (torchcomms' NCCL backend), one GPU a rank."""

    def __init__(self, torch, torchcomms, mesh, nccl, rank, size, device):
        self.torch, self.torchcomms = torch, torchcomms
        self.mesh, self.nccl = mesh, nccl
        self.rank, self.size, self.device = rank, size, device

    def seeded(self, rank, shape, dtype, salt, low=-4, high=5):
        """Rank `rank`'s input of a case: small integers, exact in every dtype (sums of a few ranks too)."""
        torch = self.torch
        g = torch.Generator().manual_seed(zlib.crc32(f"{salt}/{rank}".encode()))
        if not dtype.is_signed and not dtype.is_floating_point:
            low = 0
        shape = shape if isinstance(shape, tuple) else (shape,)
        return torch.randint(low, high, shape, generator=g).to(dtype)

    def gpu(self, t):
        return t.to(self.device)

    def poison(self, shape, dtype):
        return self.torch.full(shape if isinstance(shape, tuple) else (shape,), 77, dtype=dtype, device=self.device)


def _skip_reason():
    torch, reason = import_torch()
    if torch is None:
        return reason
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
        return "not launched by torchrun: run `torchrun --nproc-per-node=<GPUs> -m pytest tests/python/torchcomms`"
    try:
        import torchcomms  # noqa: F401
    except Exception as e:
        return f"torchcomms is not importable ({type(e).__name__}: {e})"
    try:
        import meshcomm.torchcomms  # noqa: F401
    except ImportError as e:
        return f"meshcomm's torchcomms backend is not available ({e})"
    return None


@pytest.fixture(scope="session")
def comms():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    import torch
    import torchcomms

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    mesh = torchcomms.new_comm("meshcomm", device, name="test_mesh_world")
    nccl = torchcomms.new_comm("nccl", device, name="test_nccl_world")
    assert mesh.get_backend() == "meshcomm" and nccl.get_backend() == "nccl"
    yield Comms(torch, torchcomms, mesh, nccl, mesh.get_rank(), mesh.get_size(), device)
    if _FAILED:
        print(f"[rank {os.environ.get('RANK', '?')}] {len(_FAILED)} test(s) failed: {', '.join(_FAILED)}",
              file=sys.stderr, flush=True)
        os._exit(1)
    mesh.finalize()
    nccl.finalize()
