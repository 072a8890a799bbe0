"""deep_ep: DeepEP's V1 module layout over meshcomm.ep (docs/ep.md, "The deep_ep compatibility package").

Not on sys.path by default (it would shadow an installed DeepEP); put it there to run DeepEP-API code unchanged:

    PYTHONPATH=$(python -c "import meshcomm.ep; print(meshcomm.ep.compat_path())") python train.py
"""

from meshcomm.ep import Buffer, Config, EventOverlap, topk_idx_t
from meshcomm.ep.events import EventHandle

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "topk_idx_t"]
