// Host waits on a work's end event, shared by the faces' work objects (c10d's wait(timeout)/synchronize,
// torchcomms' wait_blocking): poll the event with a growing pause, check the group's device error report on
// the way, give up after the timeout.
#pragma once

#include <cuda_runtime.h>

#include <chrono>

#include "comm_state.hpp"
#include "work_end.hpp"

namespace meshcomm::torch_backend {

// cudaEventQuery: true when complete, false while pending; other errors throw c10::Error.
bool eventDone(cudaEvent_t event);

// Blocks until `end`'s (recorded) event completes: true; false when `timeout` (> 0) passed first (a timeout
// belongs to this wait, not to the work: a later wait may still see the op complete). Returns true at once
// for an end recorded during CUDA-graph capture or while the current stream is capturing. Throws
// c10::DistBackendError with the group's device error (a peer that stopped).
bool waitOnHost(CommState& state, const WorkEnd& end, std::chrono::milliseconds timeout);

// The DistBackendError of a host wait that timed out, naming rank, op, sequence number and timeout.
[[noreturn]] void throwWaitTimeout(const CommState& state, const WorkSpec& spec,
                                   std::chrono::milliseconds timeout);

}  // namespace meshcomm::torch_backend
