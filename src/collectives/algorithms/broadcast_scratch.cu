// broadcast_scratch: the pairwise scratch pipeline between the root and every other rank: the root puts
// its input into every peer's scratch slot [root] (all peers in flight), each peer copies it out to its
// output. Root: input -> output locally unless in place (input == output). Non-root pairs are idle.
// Bandwidth limit: the root's NVLink egress carries (n-1) copies (see docs/collectives.md).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {
namespace {

struct BroadcastPlan : RootedPlanBase {
  __device__ ContigStream send(const CommDeviceView& v, int) const {
    return v.rank == root ? ContigStream{input, bytes} : ContigStream{};
  }
  __device__ ContigStream recv(const CommDeviceView&, int peer) const {
    return peer == root ? ContigStream{output, bytes} : ContigStream{};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts) const {
    if (v.rank == root) copyShare(output, input, bytes, part, nParts);
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeBroadcastScratch() {
  return std::make_shared<SimpleEngineAlgorithm<BroadcastPlan>>("broadcast_scratch", Collective::Broadcast);
}

}  // namespace meshcomm::movement
