"""deep_ep.utils: DeepEP V1's event helpers and its peer-access check."""

import torch
import torch.distributed as dist

from meshcomm.ep.events import EventHandle, EventOverlap

__all__ = ["EventHandle", "EventOverlap", "check_nvlink_connections"]


def check_nvlink_connections(group) -> None:
    """Collective over `group`: raises naming both GPUs when this rank's GPU cannot access a peer's directly
    (meshcomm.ep maps every peer's buffer over CUDA IPC, which needs peer access)."""
    devices = [None] * group.size()
    dist.all_gather_object(devices, torch.cuda.current_device(), group=group)
    mine = torch.cuda.current_device()
    for rank, device in enumerate(devices):
        if device != mine and not torch.cuda.can_device_access_peer(mine, device):
            raise RuntimeError(
                f"deep_ep.check_nvlink_connections: rank {group.rank()}: GPU {mine} cannot access GPU {device} "
                f"of rank {rank} directly (peer access is needed for the expert-parallel buffers)"
            )
