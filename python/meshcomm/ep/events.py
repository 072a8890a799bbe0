"""EventHandle and EventOverlap: DeepEP's handles on a communication call's completion.

A call made with ``async_finish=True`` returns an ``EventOverlap`` whose event was recorded on the Buffer's
communication stream after its kernels; the caller makes its own stream wait before reading the outputs:

    recv_x, ..., event = buf.dispatch(x, ..., async_finish=True)
    overlap_with_compute()
    event.current_stream_wait()      # or: with event: ...  (waits on exit)
"""

from typing import Optional, Tuple

import torch


class EventHandle:
    """A CUDA event recorded on ``stream`` (the current stream when None) at construction."""

    def __init__(self, stream: Optional[torch.cuda.Stream] = None):
        self.event = torch.cuda.Event()
        self.event.record(stream if stream is not None else torch.cuda.current_stream())

    def current_stream_wait(self) -> None:
        """Makes the current stream wait for the recorded work (the host does not block)."""
        torch.cuda.current_stream().wait_event(self.event)


class EventOverlap:
    """An optional EventHandle plus tensors kept alive until it is waited for (DeepEP's ``utils.EventOverlap``).

    ``event`` is None for a call made without ``async_finish``: its outputs are already ordered before the
    caller's stream, and waiting does nothing.
    """

    def __init__(self, event: Optional[EventHandle] = None, extra_tensors: Optional[Tuple[torch.Tensor, ...]] = None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        assert self.event is not None, "meshcomm.ep: EventOverlap.current_stream_wait: no event (async_finish was off)"
        self.event.current_stream_wait()

    def __enter__(self) -> "EventOverlap":
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        if self.event is not None:
            self.event.current_stream_wait()
