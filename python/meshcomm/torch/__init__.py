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


_register()

__all__ = [
    "BACKEND_NAME",
    "MeshcommBackend",
    "Options",
    "all_to_all_single",
    "all_to_all_single_device_splits",
    "get_backend",
]
