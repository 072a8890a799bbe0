"""meshcomm.ep: MoE expert-parallel dispatch and combine with DeepEP's V1 API (docs/ep.md).

    import meshcomm.ep as ep
    buf = ep.Buffer(group, num_nvl_bytes=int(1e9))

The normal (high-throughput) mode inside one NVLink node runs on meshcomm::ep::EpBuffer's kernels; the
low-latency and internode modes raise NotImplementedError. ``compat_path()`` is the folder of a ``deep_ep``
package that re-exports this one under DeepEP's module names.
"""

import os

from .buffer import Buffer, topk_idx_t
from .config import Config
from .events import EventHandle, EventOverlap

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "compat_path", "topk_idx_t"]


def compat_path() -> str:
    """The folder holding the ``deep_ep`` compatibility package (add it to sys.path or PYTHONPATH)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat")
