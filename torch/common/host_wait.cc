// Host waits on a work's end event (see host_wait.hpp).
#include "host_wait.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <thread>

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
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(1);
  while (!eventDone(end.event.get())) {
    state.checkDeviceError();
    if (timeout > std::chrono::milliseconds(0) && std::chrono::steady_clock::now() - start > timeout) {
      return false;
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(1000)) pause *= 2;
  }
  return true;
}

void throwWaitTimeout(const CommState& state, const WorkSpec& spec, std::chrono::milliseconds timeout) {
  C10_THROW_ERROR(DistBackendError, c10::str("meshcomm: rank ", state.rank, ": ", spec.name, " #", spec.seq,
                                             ": timed out after ", timeout.count(),
                                             " ms waiting for the device (a peer may be missing this op)"));
}

}  // namespace meshcomm::torch_backend
