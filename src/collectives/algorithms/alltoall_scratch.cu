// alltoall_scratch and alltoallv_scratch: ONE kernel family, the pairwise scratch pipeline
// (movement_common.cuh) with an AllToAllPlan<Counts>; alltoall is alltoallv with uniform counts.
//
// Counts (bytes = elements * dtype size):
//   UniformCounts  alltoall: chunk p at p*bytes on both sides; every side knows both directions, no header.
//   HostCounts     alltoallv, CountsLocation::Host: the four arrays are read on the host at launch and
//                  passed by value in the kernel parameters (no allocation, no copy, graph-capturable; a
//                  captured graph replays the values of capture time). Up to kMaxHostCountRanks ranks.
//   DeviceCounts   alltoallv, CountsLocation::Device: the kernel reads the arrays (device memory of this
//                  GPU) when it runs, so they may change between calls and graph replays.
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

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {
namespace {

constexpr int kMaxHostCountRanks = 32;

struct UniformCounts {
  static constexpr bool kHeader = false;
  uint64_t bytes;
  __device__ uint64_t sendBytes(int) const { return bytes; }
  __device__ uint64_t sendOff(int p) const { return static_cast<uint64_t>(p) * bytes; }
  __device__ uint64_t recvBytes(int) const { return bytes; }
  __device__ uint64_t recvOff(int p) const { return static_cast<uint64_t>(p) * bytes; }
};

struct HostCounts {
  static constexpr bool kHeader = true;
  uint64_t send[kMaxHostCountRanks], sendDispl[kMaxHostCountRanks];
  uint64_t recv[kMaxHostCountRanks], recvDispl[kMaxHostCountRanks];
  __device__ uint64_t sendBytes(int p) const { return send[p]; }
  __device__ uint64_t sendOff(int p) const { return sendDispl[p]; }
  __device__ uint64_t recvBytes(int p) const { return recv[p]; }
  __device__ uint64_t recvOff(int p) const { return recvDispl[p]; }
};

struct DeviceCounts {
  static constexpr bool kHeader = true;
  const size_t *send, *sendDispl, *recv, *recvDispl;
  uint64_t elemBytes;
  __device__ uint64_t sendBytes(int p) const { return send[p] * elemBytes; }
  __device__ uint64_t sendOff(int p) const { return sendDispl[p] * elemBytes; }
  __device__ uint64_t recvBytes(int p) const { return recv[p] * elemBytes; }
  __device__ uint64_t recvOff(int p) const { return recvDispl[p] * elemBytes; }
};

template <class Counts>
struct AllToAllPlan : PlanBase {
  static constexpr bool kHeader = Counts::kHeader;
  char* input;
  char* output;
  Counts counts;

  __device__ bool active(const CommDeviceView&, int) const { return true; }
  __device__ ContigStream send(const CommDeviceView&, int peer) const {
    return {input + counts.sendOff(peer), counts.sendBytes(peer)};
  }
  __device__ ContigStream recv(const CommDeviceView&, int peer) const {
    return {output + counts.recvOff(peer), counts.recvBytes(peer)};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts) const {
    const uint64_t sent = counts.sendBytes(v.rank), cap = counts.recvBytes(v.rank);
    if (kHeader && sent != cap && part == 0 && threadIdx.x == 0)
      reportMismatch(selfSpinContext(v), v.rank, cap, sent);
    copyShare(output + counts.recvOff(v.rank), input + counts.sendOff(v.rank), minU(sent, cap), part, nParts);
  }
};

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
    const int n = resources.view().nRanks;
    MESHCOMM_REQUIRE(n <= kMaxHostCountRanks, "rank ", resources.view().rank,
                     ": alltoallv: host-side counts support at most ", kMaxHostCountRanks, " ranks");
    AllToAllPlan<HostCounts> plan;
    plan.input = in;
    plan.output = out;
    for (int p = 0; p < n; ++p) {
      plan.counts.send[p] = args.sendCounts[p] * es;
      plan.counts.sendDispl[p] = args.sendDispls[p] * es;
      plan.counts.recv[p] = args.recvCounts[p] * es;
      plan.counts.recvDispl[p] = args.recvDispls[p] * es;
    }
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
