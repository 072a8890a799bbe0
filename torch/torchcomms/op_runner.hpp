// OpRunner: the enqueue path every op of a torchcomms communicator takes, its windows' ops included:
// check the op's hints and the communicator's state → pick the op stream (async_op=False: the caller's
// current stream; async_op=True: the communicator's internal stream after an event wait on the current one)
// → call the Comm with that stream current → recordStream the tensors on the internal stream → record the
// end event → a MeshcommTorchWork the watchdog follows. Shared (shared_ptr) by the communicator and its
// windows; after close() every op throws.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm_state.hpp"
#include "hints.hpp"
#include "watchdog.hpp"
#include "work.hpp"

namespace meshcomm::torch_backend {

struct OpInfo {
  const char* name;
  bool asyncOp;
  std::chrono::milliseconds timeout;  // 0 (torchcomms' kNoTimeout): the communicator's
  const Hints& hints;
};

class OpRunner {
 public:
  OpRunner(std::shared_ptr<CommState> state, std::string commName, std::chrono::milliseconds defaultTimeout,
           bool highPriorityStream);

  // Starts the watchdog (see Watchdog) with the communicator's error handling.
  void startWatchdog(AsyncErrorHandling mode, std::string modeSource, std::function<void()> beforeTerminate);
  // Stops the watchdog; later ops throw naming `why` ("finalized").
  void close(const char* why);
  bool closed() const { return closedWhy_ != nullptr; }

  const std::shared_ptr<CommState>& state() const { return state_; }
  int rank() const { return state_->rank; }

  template <typename Launch>
  c10::intrusive_ptr<torch::comms::TorchWork> run(const OpInfo& op, std::vector<at::Tensor> tensors,
                                                  Launch&& launch) {
    c10::cuda::CUDAGuard deviceGuard(state_->device);
    std::lock_guard<std::mutex> lock(state_->mutex);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(state_->device.index());
    const c10::cuda::CUDAStream stream = beginOp(op, current);
    {
      std::optional<c10::cuda::CUDAStreamGuard> streamGuard;
      if (stream != current) streamGuard.emplace(stream);
      translateErrors([&] { launch(*state_->comm, stream.stream()); });
    }
    return finishOp(op, stream, stream != current, std::move(tensors));
  }

 private:
  c10::cuda::CUDAStream beginOp(const OpInfo& op, const c10::cuda::CUDAStream& current);
  c10::intrusive_ptr<torch::comms::TorchWork> finishOp(const OpInfo& op, const c10::cuda::CUDAStream& stream,
                                                       bool onInternalStream,
                                                       std::vector<at::Tensor> tensors);

  std::shared_ptr<CommState> state_;
  const std::string commName_;
  const std::chrono::milliseconds defaultTimeout_;
  c10::cuda::CUDAStream internalStream_;
  std::unique_ptr<Watchdog> watchdog_;
  uint64_t seq_ = 0;
  const char* closedWhy_ = nullptr;
};

}  // namespace meshcomm::torch_backend
