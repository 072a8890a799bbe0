// MeshcommTorchWork (see work.hpp).
#include "work.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host_wait.hpp"

namespace meshcomm::torch_backend {

MeshcommTorchWork::MeshcommTorchWork(std::shared_ptr<CommState> state, const WorkSpec& spec,
                                     std::shared_ptr<WorkEnd> end, std::vector<at::Tensor> tensors)
    : state_(std::move(state)), spec_(spec), end_(std::move(end)), tensors_(std::move(tensors)) {}

void MeshcommTorchWork::started() {
  setStatus(WorkStatus::INPROGRESS);
}

void MeshcommTorchWork::finished(WorkOutcome outcome) {
  switch (outcome) {
    case WorkOutcome::Completed:
      setStatus(WorkStatus::COMPLETED);
      break;
    case WorkOutcome::TimedOut:
      setStatus(WorkStatus::TIMEDOUT);
      break;
    case WorkOutcome::Failed:
      setStatus(WorkStatus::ERROR);
      break;
  }
  std::vector<at::Tensor> release;
  std::lock_guard<std::mutex> lock(tensorsMutex_);
  release.swap(tensors_);
}

void MeshcommTorchWork::wait() {
  state_->throwIfFailed(spec_.name);  // the watchdog found a failure: the results are suspect
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(state_->device.index());
  if (current == end_->stream) return;  // same stream: already ordered
  c10::cuda::CUDAGuard guard(state_->device);
  C10_CUDA_CHECK(cudaStreamWaitEvent(current.stream(), end_->event.get(), 0));
}

void MeshcommTorchWork::waitBlocking() {
  state_->throwIfFailed(spec_.name);
  if (!waitOnHost(*state_, *end_, spec_.timeout)) throwWaitTimeout(*state_, spec_, spec_.timeout);
  if (status() != WorkStatus::COMPLETED && !end_->captured) setStatus(WorkStatus::COMPLETED);
}

}  // namespace meshcomm::torch_backend
