// allgather_scratch: the pairwise scratch pipeline (movement_common.cuh) with every peer: rank r sends its
// whole input to each peer and receives peer p's input into output + p*bytes; its own input is copied to
// output + r*bytes by all blocks (skipped in place: input == output + r*bytes).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

struct AllGatherPlan : RootedPlanBase {                                      // root unused
  __device__ bool active(const CommDeviceView&, int) const { return true; }  // every pair
  __device__ ContigStream send(const CommDeviceView&, int) const { return {input, bytes}; }
  __device__ ContigStream recv(const CommDeviceView&, int peer) const {
    return {output + static_cast<uint64_t>(peer) * bytes, bytes};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    copyShare(output + static_cast<uint64_t>(v.rank) * bytes, input, bytes, part, nParts, tid, nt);
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeAllGatherScratch() {
  return std::make_shared<SimpleEngineAlgorithm<AllGatherPlan>>("allgather_scratch", Collective::AllGather);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
