// allgather_ll: every rank writes its whole input as LL16 packets into every peer's packet region
// (slot [rank]); each rank unpacks peer p's packets into output + p*count. Small messages (the input must
// fit the LL slot, see LLExchangeAlgorithm). In place when input == output + rank*count.
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {

std::shared_ptr<Algorithm> makeAllGatherLL() {
  return std::make_shared<LLExchangeAlgorithm>("allgather_ll", Collective::AllGather, /*srcStrided=*/false);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
