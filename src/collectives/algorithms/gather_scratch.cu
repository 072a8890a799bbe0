// gather_scratch: the pairwise scratch pipeline between every rank and the root: rank p puts its input
// into the root's scratch slot [p]; the root copies slot p out to output + p*bytes (all peers in flight)
// and its own input to output + root*bytes (skipped in place: input == output + root*bytes). The output
// is used on the root only. Non-root pairs are idle.
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

struct GatherPlan : RootedPlanBase {
  __device__ ContigStream send(const CommDeviceView&, int peer) const {
    return peer == root ? ContigStream{input, bytes} : ContigStream{};
  }
  __device__ ContigStream recv(const CommDeviceView& v, int peer) const {
    return v.rank == root ? ContigStream{output + static_cast<uint64_t>(peer) * bytes, bytes}
                          : ContigStream{};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (v.rank == root)
      copyShare(output + static_cast<uint64_t>(root) * bytes, input, bytes, part, nParts, tid, nt);
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeGatherScratch() {
  return std::make_shared<SimpleEngineAlgorithm<GatherPlan>>("gather_scratch", Collective::Gather);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
