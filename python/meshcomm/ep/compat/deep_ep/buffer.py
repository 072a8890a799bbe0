"""deep_ep.buffer: the Buffer class, where DeepEP V1 defines it."""

from meshcomm.ep import Buffer

__all__ = ["Buffer"]
