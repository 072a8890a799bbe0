// scatter_scratch: the pairwise scratch pipeline between the root and every other rank: the root puts
// input chunk p (bytes at p*bytes) into rank p's scratch slot [root] (all peers in flight); rank p copies
// it out to its output. Root: input + root*bytes -> output locally (skipped in place: output == input +
// root*bytes). The input is used on the root only. Non-root pairs are idle.
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

struct ScatterPlan : RootedPlanBase {
  __device__ ContigStream send(const CommDeviceView& v, int peer) const {
    return v.rank == root ? ContigStream{input + static_cast<uint64_t>(peer) * bytes, bytes} : ContigStream{};
  }
  __device__ ContigStream recv(const CommDeviceView&, int peer) const {
    return peer == root ? ContigStream{output, bytes} : ContigStream{};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (v.rank == root)
      copyShare(output, input + static_cast<uint64_t>(root) * bytes, bytes, part, nParts, tid, nt);
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeScatterScratch() {
  return std::make_shared<SimpleEngineAlgorithm<ScatterPlan>>("scatter_scratch", Collective::Scatter);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
