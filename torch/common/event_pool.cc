// EventPool (see event_pool.hpp).
#include "event_pool.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace meshcomm::torch_backend {

cudaError_t queryEvent(cudaEvent_t event) {
  const cudaError_t err = cudaEventQuery(event);
  if (err == cudaErrorNotReady) (void)cudaGetLastError();
  return err;
}

std::shared_ptr<EventPool> EventPool::create(int device) {
  return std::shared_ptr<EventPool>(new EventPool(device));
}

EventPool::~EventPool() {
  // At process exit the CUDA context may already be gone: errors are ignored.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (cudaSetDevice(device_) != cudaSuccess) return;
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
  (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

std::shared_ptr<CUevent_st> EventPool::acquire() {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      event = free_.back();
      free_.pop_back();
    }
  }
  if (event == nullptr) C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  std::shared_ptr<EventPool> self = shared_from_this();
  return std::shared_ptr<CUevent_st>(event, [self](cudaEvent_t e) { self->release(e); });
}

void EventPool::release(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(event);
}

}  // namespace meshcomm::torch_backend
