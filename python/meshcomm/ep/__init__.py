"""meshcomm.ep: MoE expert-parallel dispatch and combine with DeepEP's V1 API (docs/ep.md).

    import meshcomm.ep as ep
    buf = ep.Buffer(group, num_nvl_bytes=int(1e9))

The normal (high-throughput) mode inside one NVLink node runs on meshcomm::ep::EpBuffer's kernels; the
low-latency and internode modes raise NotImplementedError.
"""

from .buffer import Buffer, topk_idx_t
from .config import Config
from .events import EventHandle, EventOverlap

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "topk_idx_t"]
