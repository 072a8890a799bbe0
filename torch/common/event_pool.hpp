// EventPool: reusable CUDA events (timing disabled) of one device, so that an op's end event costs no
// cudaEventCreate on the steady path. An acquired event goes back to the pool when its last holder drops it;
// the pool lives as long as any of its events (works may outlive their process group).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

namespace meshcomm::torch_backend {

// cudaEventQuery with cudaErrorNotReady cleared from this thread's last-error state (a pending op is not an
// error); any other error is returned and left to the caller.
cudaError_t queryEvent(cudaEvent_t event);

class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  static std::shared_ptr<EventPool> create(int device);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // An event of this pool's device; call with that device current.
  std::shared_ptr<CUevent_st> acquire();

 private:
  explicit EventPool(int device) : device_(device) {}
  void release(cudaEvent_t event);

  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace meshcomm::torch_backend
