"""meshcomm.torch: the torch.distributed backend "meshcomm" (docs/torch.md).

Importing this module imports torch and registers the backend with torch.distributed, so that

    import meshcomm.torch
    torch.cuda.set_device(local_rank)
    torch.distributed.init_process_group("cpu:gloo,cuda:meshcomm", device_id=torch.device("cuda", local_rank))

runs CUDA collectives on meshcomm (CPU tensors on gloo). `backend="meshcomm"` alone gives a CUDA-only group.
The backend is the C++ extension meshcomm._torch_backend, built when the build's Python had torch.
"""

import torch
import torch.distributed as dist

try:
    from .. import _torch_backend
except ImportError as e:  # built without torch, or for another Python
    raise ImportError(
        "meshcomm.torch: the extension meshcomm._torch_backend is missing or does not load "
        f"({e}); build meshcomm with MESHCOMM_BUILD_PYTHON=ON and a Python that has torch "
        "(pip install --no-build-isolation ., or cmake -DMESHCOMM_BUILD_TORCH=ON)"
    ) from e

from .alltoall import all_to_all_single, all_to_all_single_device_splits, get_backend

BACKEND_NAME = "meshcomm"
Options = _torch_backend.Options
MeshcommBackend = _torch_backend.MeshcommBackend


def _register():
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _torch_backend._create_backend, extended_api=True, devices=["cuda"])


def _split_sources_are_nccl_only():
    """Lets NCCL groups be created on a device-bound meshcomm world (docs/torch.md, "Mixed backends").

    torch (2.11) splits every new NCCL group from the default group's CUDA backend when that group is bound to
    a device and its backend supports splitting, and hands that backend to ProcessGroupNCCL.Options.split_from,
    which accepts only a ProcessGroupNCCL: with a meshcomm world, new_group(backend="nccl") failed with
    "incompatible function arguments". Only an NCCL backend can be an NCCL split's source, so the source is
    dropped when it is meshcomm's: NCCL then builds the group from the store, as without device_id. meshcomm
    splits (split_group) do not use this function.
    """
    c10d = dist.distributed_c10d
    original = getattr(c10d, "_get_split_source", None)
    if original is None or getattr(original, "_meshcomm_nccl_only", False):
        return

    def _get_split_source(pg):
        source = original(pg)
        return None if isinstance(source, MeshcommBackend) else source

    _get_split_source._meshcomm_nccl_only = True
    c10d._get_split_source = _get_split_source


_register()
_split_sources_are_nccl_only()

__all__ = [
    "BACKEND_NAME",
    "MeshcommBackend",
    "Options",
    "all_to_all_single",
    "all_to_all_single_device_splits",
    "get_backend",
]
