// OpRunner (see op_runner.hpp).
#include "op_runner.hpp"

#include <c10/util/Exception.h>

#include "meshcomm/env.hpp"
#include "op_stream.hpp"

namespace meshcomm::torch_backend {

OpRunner::OpRunner(std::shared_ptr<CommState> state, std::string commName,
                   std::chrono::milliseconds defaultTimeout, bool highPriorityStream)
    : state_(std::move(state)),
      commName_(std::move(commName)),
      defaultTimeout_(defaultTimeout),
      internalStream_(c10::cuda::getStreamFromPool(highPriorityStream, state_->device.index())) {}

void OpRunner::startWatchdog(AsyncErrorHandling mode, std::string modeSource,
                             std::function<void()> beforeTerminate) {
  const std::chrono::milliseconds interval(
      translateErrors([] { return envInt("MESHCOMM_TORCH_WATCHDOG_INTERVAL_MS"); }));
  watchdog_ = std::make_unique<Watchdog>(state_, *state_->comm, mode, std::move(modeSource), interval,
                                         std::move(beforeTerminate));
}

void OpRunner::close(const char* why) {
  if (watchdog_) watchdog_->stop();
  std::lock_guard<std::mutex> lock(state_->mutex);
  closedWhy_ = why;
}

c10::cuda::CUDAStream OpRunner::beginOp(const OpInfo& op, const c10::cuda::CUDAStream& current) {
  TORCH_CHECK(closedWhy_ == nullptr && state_->comm, "meshcomm: rank ", state_->rank, ": ", op.name,
              ": communicator '", commName_, "' was ", closedWhy_ ? closedWhy_ : "shut down");
  state_->throwIfFailed(op.name);
  checkOpHints({state_->rank, op.name}, op.hints);
  if (!op.asyncOp) return current;
  return joinInternalStream(*state_->events, current, internalStream_);
}

c10::intrusive_ptr<torch::comms::TorchWork> OpRunner::finishOp(const OpInfo& op,
                                                               const c10::cuda::CUDAStream& stream,
                                                               bool onInternalStream,
                                                               std::vector<at::Tensor> tensors) {
  if (onInternalStream) recordStreams(tensors, stream);
  const auto timeout = op.timeout.count() == 0 ? defaultTimeout_ : op.timeout;
  const WorkSpec spec{op.name, seq_++, timeout, false};
  auto end = std::make_shared<WorkEnd>(stream);
  end->record(*state_->events, capturing(stream.stream()));
  auto work = c10::make_intrusive<MeshcommTorchWork>(state_, spec, end, std::move(tensors));
  if (!end->captured && watchdog_) {
    work->started();
    watchdog_->track(end, spec, [work](WorkOutcome outcome) { work->finished(outcome); });
  }
  return work;
}

}  // namespace meshcomm::torch_backend
