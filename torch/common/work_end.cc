// WorkEnd (see work_end.hpp).
#include "work_end.hpp"

#include <c10/cuda/CUDAException.h>

namespace meshcomm::torch_backend {

void WorkEnd::record(EventPool& pool, bool capturingNow) {
  if (!event) event = pool.acquire();
  C10_CUDA_CHECK(cudaEventRecord(event.get(), stream.stream()));
  captured = capturingNow;
}

}  // namespace meshcomm::torch_backend
