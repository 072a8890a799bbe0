// alltoall_scratch and alltoallv_scratch: ONE kernel family, the pairwise scratch pipeline
// (movement_common.cuh) with an AllToAllPlan<Counts> (alltoall_plan.cuh: UniformCounts, HostCounts,
// DeviceCounts); alltoall is alltoallv with uniform counts.
//
// alltoallv exchanges a header per pair and call (two LL16 packets: the sender's byte count for this
// receiver and 0). The sender writes into the receiver's scratch slot [sender]; the receiver copies from
// there to output + recvDispls[p]: a sender never needs the receiver's displacements. Both sides derive the
// number of rounds from the two actual send counts, so channels stay balanced whatever the arrays say; a
// receiver whose recvCounts[p] differs from what p sends records a count mismatch (DeviceOp 6, expected =
// recvCounts[p] bytes, observed = sent bytes, fatal for the communicator) and copies at most recvCounts[p]
// elements: never out of bounds. Changing split sizes costs no setup.
// In place: alltoall yes (block (p, c) puts its piece of input chunk p before it copies the same piece of
// p's data over it); alltoallv no (send and receive layouts differ).
#include <memory>

#include "collectives/algorithms/alltoall_plan.cuh"
#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

class AllToAllScratch : public EngineAlgorithm {
 public:
  AllToAllScratch() : EngineAlgorithm("alltoall_scratch", Collective::AllToAll, /*needsHeader=*/false) {}
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return engineReason(topo);
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    AllToAllPlan<UniformCounts> plan;
    plan.input = const_cast<char*>(static_cast<const char*>(args.input));
    plan.output = static_cast<char*>(args.output);
    plan.counts.bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
    if (plan.counts.bytes == 0) return;
    launchEngine(resources, args, config, plan);
  }
};

class AllToAllvScratch : public EngineAlgorithm {
 public:
  AllToAllvScratch() : EngineAlgorithm("alltoallv_scratch", Collective::AllToAllv, /*needsHeader=*/true) {}
  // Depends on nothing that may differ between ranks except the in-place test (an error on any rank).
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = engineReason(topo);
    if (!r.empty()) return r;
    if (args.input == args.output && args.input != nullptr) return "in-place alltoallv is not supported";
    if (args.countsLocation == CountsLocation::Host && topo.nRanks > kMaxHostCountRanks) {
      return detail::concat("host-side counts support at most ", kMaxHostCountRanks,
                            " ranks (pass device counts)");
    }
    return {};
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    char* in = const_cast<char*>(static_cast<const char*>(args.input));
    char* out = static_cast<char*>(args.output);
    const uint64_t es = dataTypeSize(args.dtype);
    if (args.countsLocation == CountsLocation::Device) {
      AllToAllPlan<DeviceCounts> plan;
      plan.input = in;
      plan.output = out;
      plan.counts = {args.sendCounts, args.sendDispls, args.recvCounts, args.recvDispls, es};
      launchEngine(resources, args, config, plan);
      return;
    }
    const CommDeviceView& v = resources.view();
    AllToAllPlan<HostCounts> plan;
    plan.input = in;
    plan.output = out;
    plan.counts = makeHostCounts(args, v.rank, v.nRanks);
    launchEngine(resources, args, config, plan);
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeAllToAllScratch() {
  return std::make_shared<AllToAllScratch>();
}
std::shared_ptr<Algorithm> makeAllToAllvScratch() {
  return std::make_shared<AllToAllvScratch>();
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
