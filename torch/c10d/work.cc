// MeshcommWork (see work.hpp).
#include "work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "host_wait.hpp"
#include "op_stream.hpp"

namespace meshcomm::torch_backend {

MeshcommWork::MeshcommWork(std::shared_ptr<CommState> state, ::c10d::OpType type, const WorkSpec& spec,
                           std::shared_ptr<WorkEnd> end, std::vector<at::Tensor> outputs)
    : ::c10d::Work(state->rank, type),
      state_(std::move(state)),
      spec_(spec),
      end_(std::move(end)),
      outputs_(std::move(outputs)) {}

void MeshcommWork::requireRecorded() {
  if (end_->deferred) {
    std::call_once(deferredRecord_, [&] {
      c10::cuda::CUDAGuard guard(state_->device);
      end_->record(*state_->events, capturing(end_->stream.stream()));
    });
  }
  TORCH_CHECK(end_->event != nullptr, "meshcomm: rank ", state_->rank, ": ", spec_.name,
              ": waited on inside its coalescing block; wait on the work returned when the block ends");
}

bool MeshcommWork::isCompleted() {
  if (end_->deferred) requireRecorded();
  if (end_->event == nullptr) return false;
  if (end_->captured) return true;  // a captured op runs when the graph is replayed
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  c10::cuda::CUDAGuard guard(state_->device);
  if (!eventDone(end_->event.get())) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  completed_ = true;
  return true;
}

void MeshcommWork::streamWait() {
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(state_->device.index());
  if (end_->deferred && current == end_->stream) return;  // same stream: already ordered, no event needed
  c10::cuda::CUDAGuard guard(state_->device);
  requireRecorded();
  if (current == end_->stream) return;  // same stream: already ordered
  C10_CUDA_CHECK(cudaStreamWaitEvent(current.stream(), end_->event.get(), 0));
}

void MeshcommWork::blockHost(std::chrono::milliseconds timeout) {
  requireRecorded();
  bool done = false;
  try {
    done = waitOnHost(*state_, *end_, timeout);
  } catch (...) {  // a device error stays with the work
    std::lock_guard<std::mutex> lock(mutex_);
    exception_ = std::current_exception();
    throw;
  }
  if (!done) throwWaitTimeout(*state_, spec_, timeout);
  std::lock_guard<std::mutex> lock(mutex_);
  completed_ = true;
}

bool MeshcommWork::wait(std::chrono::milliseconds timeout) {
  state_->throwIfFailed(spec_.name);  // the group's watchdog found a failure: its results are suspect
  streamWait();
  if (timeout != kNoTimeout) {
    blockHost(timeout);
  } else if (spec_.blocking) {
    blockHost(spec_.timeout);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void MeshcommWork::synchronize() {
  state_->throwIfFailed(spec_.name);
  streamWait();
  blockHost(spec_.timeout);
}

void MeshcommWork::blockCurrentStream() {
  streamWait();
}

std::vector<at::Tensor> MeshcommWork::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> MeshcommWork::getFuture() {
  if (!future_) {
    requireRecorded();
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{state_->device});
    // Marked complete on the op's stream: the future's CUDA event follows the op (and whatever that stream
    // ran since, which only delays it).
    c10::cuda::CUDAStreamGuard guard(end_->stream);
    future_->markCompleted(at::IValue(outputs_));
  }
  return future_;
}

uint64_t MeshcommWork::getSequencenumber() const {
  return spec_.seq;
}

}  // namespace meshcomm::torch_backend
