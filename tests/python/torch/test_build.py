"""The extension meshcomm._torch_backend without a GPU or a process group: it was built when torch was there."""

import pytest
from torch_env import import_torch


def test_backend_registers_without_a_gpu():
    torch, reason = import_torch()
    if torch is None:
        pytest.skip(reason)
    import torch.distributed as dist

    import meshcomm.torch as mt

    assert "MESHCOMM" in dist.Backend._plugins
    assert dist.Backend.backend_capability["meshcomm"] == ["cuda"]
    import copy

    options = mt.Options(scratch_bytes=1 << 20)
    clone = copy.deepcopy(options)
    assert clone.scratch_bytes == 1 << 20 and clone.backend == "meshcomm"
    assert issubclass(mt.MeshcommBackend, torch._C._distributed_c10d.Backend)
