// barrier_channels: one block; thread i < n-1 signals peerAt(i) on channel 0 (release), then waits for that
// peer's signal (acquire), then the block synchronises. One signal and one wait per (peer, channel 0) and
// call: balanced. Stream-ordered: everything before it on the stream (previous kernels) is complete and
// visible to the peers after their barrier returns. A timeout is recorded by the wait; the kernel ends.
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

__global__ void barrierKernel(CommDeviceView v) {
  device::barrierAllPeers(v, 0);
}

class BarrierChannels : public Algorithm {
 public:
  std::string name() const override { return "barrier_channels"; }
  Collective collective() const override { return Collective::Barrier; }
  void initialize(CommResources& resources) override { resources_ = &resources; }
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    if (resources_ == nullptr) return "not initialized";
    if (topo.nRanks > 1 && resources_->view().channelsPerPeer < 1)
      return "needs at least one channel per peer";
    return commonReason(topo, *resources_);
  }
  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    return {1, threadsFor(topo.nRanks)};
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    if (v.nRanks < 2) return;
    barrierKernel<<<1, threadsFor(v.nRanks), 0, args.stream>>>(v);  // the shape is fixed: one block
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }

 private:
  static int threadsFor(int nRanks) { return std::max(32, (nRanks - 1 + 31) / 32 * 32); }
  const CommResources* resources_ = nullptr;
};

}  // namespace

std::shared_ptr<Algorithm> makeBarrierChannels() {
  return std::make_shared<BarrierChannels>();
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
