// MeshcommTorchComm: the torchcomms backend "meshcomm" (docs/torchcomms.md), a torch::comms::TorchCommBackend
// on one meshcomm Comm per communicator. torchcomms.new_comm("meshcomm", device, name=...) builds it; the
// torch.distributed routing of torch 2.11 (TORCH_DISTRIBUTED_USE_TORCHCOMMS=1) builds it for every
// cuda:meshcomm process group.
//
// Every op checks its arguments on the host, then takes the OpRunner's path (op_runner.hpp): op stream, the
// Comm call, recordStream, end event, a MeshcommTorchWork that keeps the tensors alive until the watchdog
// sees the op complete. Nothing blocks the host and nothing allocates device memory outside torch's caching
// allocator, so the collectives can be captured in CUDA graphs (after one eager call on the same buffers).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <comms/torchcomms/TorchCommBackend.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm_state.hpp"
#include "dtypes.hpp"
#include "hints.hpp"
#include "op_runner.hpp"

namespace meshcomm::torch_backend {

class MeshcommTorchComm : public torch::comms::TorchCommBackend {
 public:
  static constexpr const char* kBackendName = "meshcomm";

  MeshcommTorchComm() = default;
  ~MeshcommTorchComm() override;

  // Collective over the communicator's ranks (group_rank.hpp says where rank and size come from).
  void init(at::Device device, const std::string& name, const torch::comms::CommOptions& options) override;
  // Waits for every enqueued op (raising the group's failure, if any), then the collective teardown.
  void finalize() override;

  int getRank() const override { return rank_; }
  int getSize() const override { return size_; }
  std::string_view getBackendName() const override { return kBackendName; }
  std::string_view getBackendVersion() const override;
  std::string_view getCommName() const override { return name_; }
  const torch::comms::CommOptions& getOptions() const override { return options_; }
  const at::Device& getDevice() const override { return device_; }

  // Point to point (backend_p2p.cc).
  c10::intrusive_ptr<torch::comms::TorchWork> send(const at::Tensor& tensor, int dst, bool async_op,
                                                   const torch::comms::SendOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> recv(at::Tensor& tensor, int src, bool async_op,
                                                   const torch::comms::RecvOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> batch_op_issue(
      const std::vector<torch::comms::BatchSendRecv::P2POp>& ops, bool async_op,
      const torch::comms::BatchP2POptions& options) override;

  // Reductions and broadcast (backend_reduce.cc).
  c10::intrusive_ptr<torch::comms::TorchWork> broadcast(
      at::Tensor& tensor, int root, bool async_op, const torch::comms::BroadcastOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> all_reduce(
      at::Tensor& tensor, const torch::comms::ReduceOp& op, bool async_op,
      const torch::comms::AllReduceOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> reduce(const at::Tensor& tensor, int root,
                                                     const torch::comms::ReduceOp& op, bool async_op,
                                                     const torch::comms::ReduceOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> reduce_scatter(
      at::Tensor& output, const std::vector<at::Tensor>& input_list, const torch::comms::ReduceOp& op,
      bool async_op, const torch::comms::ReduceScatterOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> reduce_scatter_v(
      at::Tensor& output, const std::vector<at::Tensor>& input_list, const torch::comms::ReduceOp& op,
      bool async_op, const torch::comms::ReduceScatterOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> reduce_scatter_single(
      at::Tensor& output, const at::Tensor& input, const torch::comms::ReduceOp& op, bool async_op,
      const torch::comms::ReduceScatterSingleOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> barrier(bool async_op,
                                                      const torch::comms::BarrierOptions& options) override;

  // Gathers, scatters and all-to-alls (backend_gather.cc).
  c10::intrusive_ptr<torch::comms::TorchWork> all_gather(
      const std::vector<at::Tensor>& tensor_list, const at::Tensor& tensor, bool async_op,
      const torch::comms::AllGatherOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> all_gather_v(
      const std::vector<at::Tensor>& tensor_list, const at::Tensor& tensor, bool async_op,
      const torch::comms::AllGatherOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> all_gather_single(
      at::Tensor& output, const at::Tensor& input, bool async_op,
      const torch::comms::AllGatherSingleOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> all_to_all_single(
      at::Tensor& output, const at::Tensor& input, bool async_op,
      const torch::comms::AllToAllSingleOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> all_to_all_v_single(
      at::Tensor& output, const at::Tensor& input, const std::vector<uint64_t>& output_split_sizes,
      const std::vector<uint64_t>& input_split_sizes, bool async_op,
      const torch::comms::AllToAllvSingleOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> all_to_all(
      const std::vector<at::Tensor>& output_tensor_list, const std::vector<at::Tensor>& input_tensor_list,
      bool async_op, const torch::comms::AllToAllOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> scatter(at::Tensor& output_tensor,
                                                      const std::vector<at::Tensor>& input_tensor_list,
                                                      int root, bool async_op,
                                                      const torch::comms::ScatterOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> gather(const std::vector<at::Tensor>& output_tensor_list,
                                                     const at::Tensor& input_tensor, int root, bool async_op,
                                                     const torch::comms::GatherOptions& options) override;

  // NCCL split semantics: collective over this communicator; `ranks` is the caller's group (its parent
  // ranks, new rank = index), {} for a rank that joins none (it gets nullptr).
  std::shared_ptr<torch::comms::TorchCommBackend> split(const std::vector<int>& ranks,
                                                        const std::string& name,
                                                        const torch::comms::CommOptions& options) override;

  // A window for one-sided puts and signals (window.hpp); the tensor, if given, is registered at once.
  std::shared_ptr<torch::comms::TorchCommWindow> new_window(const std::optional<at::Tensor>& tensor) override;

 private:
  // Takes a Comm that exists (init's, or split's child) and starts the communicator on it.
  void adopt(std::unique_ptr<Comm> comm, at::Device device, const std::string& name,
             const torch::comms::CommOptions& options);
  OpContext context(const char* op) const { return {rank_, op}; }
  void checkTensor(const char* op, const char* argument, const at::Tensor& t) const;
  void checkList(const char* op, const char* argument, const std::vector<at::Tensor>& list,
                 size_t expected) const;
  template <typename Launch>
  c10::intrusive_ptr<torch::comms::TorchWork> run(const OpInfo& op, std::vector<at::Tensor> tensors,
                                                  Launch&& launch) {
    TORCH_CHECK(runner_ != nullptr, "meshcomm: ", op.name, ": the communicator was never initialized");
    return runner_->run(op, std::move(tensors), std::forward<Launch>(launch));
  }

  int rank_ = -1;
  int size_ = 0;
  std::string name_;
  at::Device device_{at::kCUDA};
  torch::comms::CommOptions options_;
  CommSettings settings_;  // what the options' hints ask for
  std::shared_ptr<CommState> state_;
  std::shared_ptr<OpRunner> runner_;  // shared with the communicator's windows
  bool finalized_ = false;
};

}  // namespace meshcomm::torch_backend
