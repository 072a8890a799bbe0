// alltoall_ll: chunk p of the input (count elements at p*count) goes as LL16 packets into rank p's packet
// region (slot [rank]); each rank unpacks peer p's packets into output + p*count. Small messages (a chunk
// must fit the LL slot). In place (input == output) works: a block reads its share of input chunk p
// before it writes the same share of output chunk p.
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {

std::shared_ptr<Algorithm> makeAllToAllLL() {
  return std::make_shared<LLExchangeAlgorithm>("alltoall_ll", Collective::AllToAll, /*srcStrided=*/true);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
