"""meshcomm.torchcomms: meshcomm as a torchcomms backend (docs/torchcomms.md).

torchcomms finds it through the ``torchcomms.backends`` entry point ``meshcomm``, which names this module:

    import torchcomms
    comm = torchcomms.new_comm("meshcomm", torch.device("cuda", local_rank), name="grad_sync")
    comm.all_reduce(t, torchcomms.ReduceOp.SUM, async_op=False)

Importing it checks that the installed torchcomms is the release the backend was built against (the backend
ABI changes between releases), loads the extension meshcomm._torchcomms_backend (which registers the
backend with torchcomms' factory) and installs the c10d group source: torch 2.11's torch.distributed routing
(TORCH_DISTRIBUTED_USE_TORCHCOMMS=1) passes a new process group's rank and size to no backend, so meshcomm
reads them from torch's group-creation call, and ``dist.new_group(ranks)`` builds the group of its members.
"""

import importlib.metadata
import sys

try:
    from . import _build
except ImportError as e:
    raise ImportError(
        "meshcomm.torchcomms: this meshcomm was built without its torchcomms backend (torchcomms, or its C++ "
        "headers, were not found when meshcomm was built; see docs/torchcomms.md, 'Build')"
    ) from e

# The backend ABI of each torchcomms release line (TORCHCOMM_BACKEND_ABI_VERSION), for messages.
_ABI_OF_RELEASE = {"0.2": "1.0", "0.3": "1.1"}


def _release(version):
    """'0.2.0+cu130' -> '0.2.0'; '0.3.0.dev20260407' -> '0.3.0'."""
    parts = version.split("+")[0].split(".")
    return ".".join(p for p in parts[:3])


def _abi_of(version):
    return _ABI_OF_RELEASE.get(".".join(version.split(".")[:2]), "unknown")


def check_torchcomms_version(installed=None):
    """Raises ImportError naming both versions when the installed torchcomms is not the one built against."""
    installed = installed if installed is not None else importlib.metadata.version("torchcomms")
    built = _build.TORCHCOMMS_VERSION
    if _release(installed) != _release(built):
        raise ImportError(
            f"meshcomm.torchcomms: the backend was built against torchcomms {built} (backend ABI "
            f"{_build.BACKEND_ABI_VERSION}) but torchcomms {installed} (backend ABI {_abi_of(installed)}) is "
            "installed; rebuild meshcomm against the installed torchcomms (docs/torchcomms.md, 'Build')"
        )


def _c10d_group():
    """(group_rank, group_size, cuda_device) of the torch.distributed group the calling thread is creating for
    meshcomm, read from torch's _new_process_group_helper frame (torch 2.11's routing passes the backend an
    index-less device: the group's device_id, else the current device); None when the call does not come
    from there.

    Raises RuntimeError for a group of several backends (e.g. "cpu:gloo,cuda:meshcomm"): torch 2.11's routing
    registers every torchcomms communicator as backend type CUSTOM and a group keeps one backend per type, so
    both devices would end up on one communicator (torch asserts on bound device ids, or, without device_id,
    sends CUDA tensors to the first backend)."""
    frame = sys._getframe(1)
    while frame is not None:
        if (
            frame.f_code.co_name == "_new_process_group_helper"
            and frame.f_globals.get("__name__") == "torch.distributed.distributed_c10d"
        ):
            local = frame.f_locals
            if local.get("backend_str") != BACKEND_NAME:
                return None
            config = local.get("backend_config")
            backends = set(config.get_device_backend_map().values()) if config is not None else set()
            if len(backends) > 1:
                raise RuntimeError(
                    f"meshcomm: rank {local.get('group_rank')}: init: the process group's backends "
                    f"'{config}' cannot be routed through torchcomms by this torch: it keeps one torchcomms "
                    "communicator per group for every device, so CUDA tensors would not reach meshcomm. Use "
                    "'cuda:meshcomm' alone, and create CPU (gloo) groups with "
                    "torch.distributed.config.use_torchcomms = False (docs/torchcomms.md)"
                )
            return int(local["group_rank"]), int(local["group_size"]), _group_device(local.get("device_id"))
        frame = frame.f_back
    return None


def _group_device(device_id):
    """The CUDA device index of a group being created: its device_id, else the current device."""
    if device_id is not None and getattr(device_id, "index", None) is not None:
        return int(device_id.index)
    import torch

    return int(torch.cuda.current_device())


BACKEND_NAME = "meshcomm"

check_torchcomms_version()
import torchcomms  # noqa: E402  (loads libtorchcomms.so, which the extension links)

from .. import _torchcomms_backend  # noqa: E402  (registers the backend)

_torchcomms_backend._set_group_source(_c10d_group)

TORCHCOMMS_VERSION = _build.TORCHCOMMS_VERSION
BACKEND_ABI_VERSION = _build.BACKEND_ABI_VERSION

__all__ = ["BACKEND_ABI_VERSION", "BACKEND_NAME", "TORCHCOMMS_VERSION", "check_torchcomms_version"]
