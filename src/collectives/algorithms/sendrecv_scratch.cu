// sendrecv_scratch: a group of point-to-point operations as one launch of the pairwise scratch pipeline
// (plan: sendrecv_plan.cuh). Per peer, this rank's sends form one byte stream (in group order) and its
// receives another; operations match by order per (sender, receiver) pair. A pair is active when this
// rank has at least one operation with the peer (the peer must have the matching ones, else its side never
// signals and the wait times out with peer and rank named). Each active pair exchanges a header {total
// bytes, signature of the sequence of operation sizes}; a receiver whose own sizes disagree records a count
// mismatch (DeviceOp 6) and never writes past its own receive buffers (copy limited to min(sent, expected)
// bytes of the stream). Operations with oneself are copied locally in order (same checks). Limits:
// kMaxP2PSegs operations per group and kMaxP2PRanks ranks (host-side arrays passed by value in the kernel
// parameters).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "collectives/algorithms/strided_group.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

class SendRecvScratch : public EngineAlgorithm {
 public:
  SendRecvScratch() : EngineAlgorithm("sendrecv_scratch", Collective::SendRecv, /*needsHeader=*/true) {}
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return sendRecvReason(engineReason(topo), args, topo.nRanks);
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    const SendRecvPlan plan = makeSendRecvPlan(args, v.rank, v.nRanks);
    if (args.numP2POps == 0) return;
    runWithGroupPlan(plan, v.rank, v.nRanks,
                     [&](const auto& p) { this->launchEngine(resources, args, config, p); });
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeSendRecvScratch() {
  return std::make_shared<SendRecvScratch>();
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
