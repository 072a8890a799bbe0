// MeshcommTorchWindow: torchcomms' TorchCommWindow on a meshcomm Window (include/meshcomm/window.hpp): every
// rank registers one tensor (tensor_register, collective); put copies a local tensor into a peer's window at
// an element offset over NVLink, signal / wait_signal order those writes with the peer, map_remote_tensor
// views a peer's window directly (every peer of an NVLink node is mapped: access type UNIFIED). Ops run on
// the communicator's OpRunner: stream-ordered, async or not, graph-capturable, with the same works and
// watchdog as the collectives. Deregister (collective) before the communicator is finalized.
#pragma once

#include <comms/torchcomms/TorchCommWindow.hpp>

#include <memory>
#include <optional>

#include "meshcomm/window.hpp"
#include "op_runner.hpp"

namespace meshcomm::torch_backend {

class MeshcommTorchWindow : public torch::comms::TorchCommWindow {
 public:
  explicit MeshcommTorchWindow(std::shared_ptr<OpRunner> runner);
  ~MeshcommTorchWindow() override;

  void tensor_register(const at::Tensor& tensor, bool owning = true) override;
  void tensor_deregister() override;
  std::shared_ptr<torch::comms::TorchCommWindow> clone() override;
  c10::intrusive_ptr<torch::comms::TorchWork> put(const at::Tensor& tensor, int dstRank,
                                                  size_t targetOffsetNelems, bool asyncOp,
                                                  const torch::comms::PutOptions& options) override;
  at::Tensor map_remote_tensor(int rank) override;
  c10::intrusive_ptr<torch::comms::TorchWork> signal(int peerRank, bool asyncOp,
                                                     const torch::comms::SignalOptions& options) override;
  c10::intrusive_ptr<torch::comms::TorchWork> wait_signal(
      int peerRank, bool asyncOp, const torch::comms::WaitSignalOptions& options) override;
  std::shared_ptr<torch::comms::TorchCommWindowAttr> get_attr(int peerRank) override;

 private:
  Window& registered(const char* op) const;
  void checkPeer(const char* op, int peer) const;

  std::shared_ptr<OpRunner> runner_;
  std::unique_ptr<Window> window_;  // null until tensor_register
};

}  // namespace meshcomm::torch_backend
