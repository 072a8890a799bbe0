// Op stream selection helpers (see op_stream.hpp).
#include "op_stream.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>

namespace meshcomm::torch_backend {

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

c10::cuda::CUDAStream joinInternalStream(EventPool& events, const c10::cuda::CUDAStream& current,
                                         const c10::cuda::CUDAStream& internal) {
  std::shared_ptr<CUevent_st> ready = events.acquire();
  C10_CUDA_CHECK(cudaEventRecord(ready.get(), current.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(internal.stream(), ready.get(), 0));
  return internal;
}

void recordStreams(c10::ArrayRef<at::Tensor> tensors, const c10::cuda::CUDAStream& stream) {
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.has_storage()) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
  }
}

}  // namespace meshcomm::torch_backend
