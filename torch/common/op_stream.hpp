// The stream an op runs on, as ProcessGroupNCCL and torchcomms' NCCL backend choose it: a synchronous op
// (async_op=False) runs on the caller's current stream; an asynchronous one on the group's internal stream,
// which first waits (an event, no host synchronisation) for everything the caller enqueued so far. Tensors an
// op on the internal stream reads or writes are recordStream'ed there, so the caching allocator does not hand
// their blocks out again before the internal stream is done with them.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/ArrayRef.h>

#include "event_pool.hpp"

namespace meshcomm::torch_backend {

// True while `stream` is being captured into a CUDA graph.
bool capturing(cudaStream_t stream);

// `internal` after an event wait on `current` (the event comes from `events`).
c10::cuda::CUDAStream joinInternalStream(EventPool& events, const c10::cuda::CUDAStream& current,
                                         const c10::cuda::CUDAStream& internal);

// recordStream of every defined tensor with storage.
void recordStreams(c10::ArrayRef<at::Tensor> tensors, const c10::cuda::CUDAStream& stream);

}  // namespace meshcomm::torch_backend
