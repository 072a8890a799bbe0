// Host waits on a work's end event (see host_wait.hpp).
#include "host_wait.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "meshcomm/host_poll.hpp"
#include "op_stream.hpp"

namespace meshcomm::torch_backend {

bool eventDone(cudaEvent_t event) {
  const cudaError_t err = queryEvent(event);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  C10_CUDA_CHECK(err);
  return false;
}

bool waitOnHost(CommState& state, const WorkEnd& end, std::chrono::milliseconds timeout) {
  c10::cuda::CUDAGuard guard(state.device);
  if (end.captured || capturing(c10::cuda::getCurrentCUDAStream(state.device.index()).stream())) return true;
  HostPoll poll(std::chrono::microseconds(1000), std::chrono::microseconds(1000));
  while (!eventDone(end.event.get())) {
    state.checkDeviceError();
    if (timeout > std::chrono::milliseconds(0) && poll.elapsed() > timeout) return false;
    poll.pause();
  }
  return true;
}

void throwWaitTimeout(const CommState& state, const WorkSpec& spec, std::chrono::milliseconds timeout) {
  C10_THROW_ERROR(DistBackendError, c10::str("meshcomm: rank ", state.rank, ": ", spec.name, " #", spec.seq,
                                             ": timed out after ", timeout.count(),
                                             " ms waiting for the device (a peer may be missing this op)"));
}

}  // namespace meshcomm::torch_backend
