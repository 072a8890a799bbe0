// MeshcommTorchWork: the torchcomms TorchWork of one meshcomm op (torchcomms' NCCL model):
// - the op ran on `stream` and an end event was recorded there after it;
// - wait() makes the caller's current stream wait on that event (no host synchronisation) and raises the
//   communicator's recorded failure, if any;
// - wait_blocking() blocks the host until the op is done (the op's timeout; DistBackendError on a timeout or
//   a device error);
// - status() moves NOT_STARTED → INPROGRESS → COMPLETED / TIMEDOUT / ERROR: the communicator's watchdog
//   tracks the end event and reports how the op ended (is_completed() can lag by one watchdog interval).
// The work holds the op's tensors until the watchdog sees the op complete, so a caller may drop its own
// references right after enqueueing. A work created during CUDA-graph capture only orders streams: its end
// event belongs to the graph, and the graph keeps the tensors (torch's graph memory pool).
#pragma once

#include <comms/torchcomms/TorchWork.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "comm_state.hpp"
#include "work_end.hpp"

namespace meshcomm::torch_backend {

class MeshcommTorchWork : public torch::comms::TorchWork {
 public:
  MeshcommTorchWork(std::shared_ptr<CommState> state, const WorkSpec& spec, std::shared_ptr<WorkEnd> end,
                    std::vector<at::Tensor> tensors);

  void wait() override;
  void waitBlocking() override;
  std::chrono::milliseconds getTimeout() const override { return spec_.timeout; }

  // The op started (its end event is recorded) or ended, as the watchdog saw it.
  void started();
  void finished(WorkOutcome outcome);

 private:
  std::shared_ptr<CommState> state_;
  WorkSpec spec_;
  std::shared_ptr<WorkEnd> end_;
  std::mutex tensorsMutex_;
  std::vector<at::Tensor> tensors_;  // released when the op is done
};

}  // namespace meshcomm::torch_backend
