// WorkEnd and WorkSpec: where one enqueued meshcomm op ends and what it is, shared by the work objects of
// both faces (c10d's MeshcommWork, torchcomms' MeshcommTorchWork) and by the watchdog that follows them.
#pragma once

#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "event_pool.hpp"

namespace meshcomm::torch_backend {

// Where a work ends: the op stream and the event recorded on it. Works issued inside a c10d coalescing block
// share one, recorded when the block ends.
struct WorkEnd {
  explicit WorkEnd(c10::cuda::CUDAStream s) : stream(s) {}
  c10::cuda::CUDAStream stream;
  std::shared_ptr<CUevent_st> event;  // null until recorded
  bool captured = false;              // recorded during CUDA-graph capture (cannot be queried)
  // A blocking c10d op (async_op=False) ran on the caller's current stream, where the caller's next work is
  // ordered after it anyway: its end is recorded only when something asks for it (host overhead).
  bool deferred = false;

  // Records (or re-records) the end event on `stream`.
  void record(EventPool& pool, bool capturing);
};

struct WorkSpec {
  const char* name;                   // the op, for messages
  uint64_t seq;                       // the group's op count when it was issued
  std::chrono::milliseconds timeout;  // the op's timeout (the group's when the op named none)
  bool blocking;                      // c10d barrier: wait() blocks the host
};

// How a watched work ended (Watchdog::track's callback).
enum class WorkOutcome { Completed, TimedOut, Failed };

}  // namespace meshcomm::torch_backend
