// MeshcommBackend: the c10d Backend "meshcomm" (docs/torch.md). One meshcomm Comm per process group on the
// CUDA device that was current when the group was created; the ranks meet through the group's c10d Store.
//
// Every op takes the same path (run()): check the arguments → pick the op stream → call the Comm →
// protect the tensors → record the end event → return a MeshcommWork. Stream semantics are
// ProcessGroupNCCL's: an async op (asyncOp=true, every P2P op, everything inside a coalescing block) runs
// on the group's internal stream after an event wait on the caller's current stream, and its tensors are
// recordStream'ed there; a sync op (asyncOp=false) runs on the caller's current stream. Nothing blocks the
// host and nothing allocates on the steady path, so collectives can be captured in CUDA graphs.
#pragma once

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "comm_state.hpp"
#include "dtypes.hpp"
#include "options.hpp"
#include "reduce_op.hpp"
#include "watchdog.hpp"
#include "work.hpp"

namespace meshcomm::torch_backend {

class MeshcommBackend : public ::c10d::Backend {
 public:
  // Collective over the group's ranks (see createComm).
  MeshcommBackend(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                  c10::intrusive_ptr<MeshcommOptions> options);
  ~MeshcommBackend() override;

  const std::string getBackendName() const override { return "meshcomm"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void eagerConnectSingleDevice(at::Device device) override;
  ::c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  c10::intrusive_ptr<::c10d::Backend> split(const c10::intrusive_ptr<::c10d::Store>& store,
                                            const std::vector<int>& ranks,
                                            const c10::intrusive_ptr<Options>& opts) override;

  void startCoalescing() override;
  c10::intrusive_ptr<::c10d::Work> endCoalescing() override;

  // Collectives (backend_collectives.cc).
  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;

  // Gathers and scatters (backend_gather.cc).
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                  std::vector<std::vector<at::Tensor>>& inputs,
                                                  const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                        const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;

  // All-to-all and point-to-point (backend_alltoall.cc).
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& outputSplitSizes,
                                                 std::vector<int64_t>& inputSplitSizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;

  // all_to_all_single with split sizes in device int64 tensors (alltoallv_device.cc): counts and
  // displacements are computed on the op stream, no host synchronisation (graph-capturable).
  c10::intrusive_ptr<::c10d::Work> allToAllSingleDeviceSplits(at::Tensor& output, at::Tensor& input,
                                                              const at::Tensor& outputSplits,
                                                              const at::Tensor& inputSplits, bool asyncOp);

  const at::Device& device() const { return state_->device; }
  // The failure the group's watchdog recorded, if any (docs/torch.md "Watchdog").
  std::optional<std::string> failure() const { return state_->failure(); }

  // Runs f(Comm&) under the group's lock; throws after shutdown() (diagnostics: host_timing.cc).
  template <typename F>
  void withComm(F&& f) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(state_->comm, "meshcomm: rank ", getRank(), ": process group was shut down");
    f(*state_->comm);
  }

 private:
  struct OpInfo {
    ::c10d::OpType type;
    const char* name;
    bool asyncOp;
    std::chrono::milliseconds timeout;  // kUnsetTimeout: the group's
    bool blocking = false;
  };

  OpContext context(const char* op) const { return {getRank(), op}; }
  void checkTensor(const char* op, const char* argument, const at::Tensor& t) const;

  // The common enqueue path: `launch(Comm&, cudaStream_t)` runs with the op stream current (so torch ops in
  // it, such as copies into list outputs, are ordered with the collective). `inputs`/`outputs` are kept
  // alive for the op's duration (recordStream on an internal stream); `outputs` are the work's result.
  // A sync op runs on the caller's current stream: no stream switch, no event, no allocator bookkeeping.
  template <typename Launch>
  c10::intrusive_ptr<::c10d::Work> run(const OpInfo& op, c10::ArrayRef<at::Tensor> inputs,
                                       std::vector<at::Tensor> outputs, Launch&& launch) {
    c10::cuda::CUDAGuard deviceGuard(state_->device);
    std::lock_guard<std::mutex> lock(state_->mutex);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(state_->device.index());
    const c10::cuda::CUDAStream stream = beginOp(op, current);
    const bool onCurrentStream = stream == current;
    {
      std::optional<c10::cuda::CUDAStreamGuard> streamGuard;
      if (!onCurrentStream) streamGuard.emplace(stream);
      translateErrors([&] { launch(*state_->comm, stream.stream()); });
    }
    return finishOp(op, stream, onCurrentStream, inputs, std::move(outputs));
  }

  // The op stream: `current`, or the internal stream after an event wait on `current` for an async op;
  // throws after shutdown().
  c10::cuda::CUDAStream beginOp(const OpInfo& op, const c10::cuda::CUDAStream& current);
  c10::intrusive_ptr<::c10d::Work> finishOp(const OpInfo& op, const c10::cuda::CUDAStream& stream,
                                            bool onCurrentStream, c10::ArrayRef<at::Tensor> inputs,
                                            std::vector<at::Tensor> outputs);
  WorkSpec workSpec(const OpInfo& op) const;
  c10::intrusive_ptr<MeshcommWork> makeWork(const OpInfo& op, std::shared_ptr<WorkEnd> end,
                                            std::vector<at::Tensor> outputs) const;

  std::shared_ptr<CommState> state_;
  c10::intrusive_ptr<MeshcommOptions> options_;
  std::unique_ptr<Watchdog> watchdog_;  // stopped by shutdown(), before the Comm closes
  c10::cuda::CUDAStream internalStream_;
  uint64_t seq_ = 0;
  uint64_t splitCount_ = 0;  // split() calls so far (collective over the parent: equal on every member)
  // Coalescing block (startCoalescing..endCoalescing): the shared end and the tensors of its ops.
  bool coalescing_ = false;
  std::shared_ptr<WorkEnd> coalescedEnd_;
  std::vector<at::Tensor> coalescedOutputs_;
  // Host scratch of alltoall_base (reused: no allocation on the steady path).
  std::vector<size_t> sendCounts_, sendDispls_, recvCounts_, recvDispls_;
};

}  // namespace meshcomm::torch_backend
