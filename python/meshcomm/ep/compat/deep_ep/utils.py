"""deep_ep.utils: DeepEP V1's event helpers, and its NVLink check (meshcomm checks the links when it maps peers)."""

from meshcomm.ep.events import EventHandle, EventOverlap

__all__ = ["EventHandle", "EventOverlap", "check_nvlink_connections"]


def check_nvlink_connections(group) -> None:
    """DeepEP checks that every pair of GPUs is NVLink-connected; meshcomm's Buffer maps every peer over CUDA IPC
    when it is built and fails there, naming the peer, when a mapping is impossible."""
