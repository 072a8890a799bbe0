// MeshcommWork: the c10d Work of one meshcomm op (or of one coalesced block), ProcessGroupNCCL's model:
// - the op ran on `stream` and an end event was recorded there after it;
// - wait() makes the caller's current stream wait on that event (no host synchronisation); with a timeout,
//   or for barrier, it also blocks the host until the event completes, raising DistBackendError on timeout
//   or on a meshcomm device error;
// - synchronize() blocks the host (with the op's timeout); blockCurrentStream() only orders the stream;
// - isCompleted() queries the event; getFuture() is a CUDA-aware future completed on the op's stream.
// Works created during CUDA-graph capture only order streams (events recorded in a capture cannot be
// queried). A blocking op's end event is recorded lazily, on first use (WorkEnd::deferred): later, so the
// wait covers the op and whatever its stream ran since, which can only delay completion.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "comm_state.hpp"
#include "work_end.hpp"

namespace meshcomm::torch_backend {

class MeshcommWork : public ::c10d::Work {
 public:
  MeshcommWork(std::shared_ptr<CommState> state, ::c10d::OpType type, const WorkSpec& spec,
               std::shared_ptr<WorkEnd> end, std::vector<at::Tensor> outputs);

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void blockCurrentStream() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;

 private:
  void requireRecorded();
  void streamWait();
  void blockHost(std::chrono::milliseconds timeout);

  std::shared_ptr<CommState> state_;
  WorkSpec spec_;
  std::shared_ptr<WorkEnd> end_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag deferredRecord_;
};

}  // namespace meshcomm::torch_backend
