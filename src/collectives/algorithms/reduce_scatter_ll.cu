// reduce_scatter_ll: every rank writes input chunk p as LL16 packets into its slot of rank p's packet
// region; rank p reduces chunk p of all ranks in rank order (its own chunk read locally) into its output.
// Small messages (default up to 512 KiB per rank, capped by the packet budget). See ll_reduce.cuh.
#include "collectives/algorithms/ll_reduce.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeReduceScatterLL() {
  return std::make_shared<LLReductionAlgorithm<LLMode::ReduceScatter>>(
      "reduce_scatter_ll", Collective::ReduceScatter, /*maxBytes=*/512 << 10, /*budgetFraction=*/0.125,
      /*packsPerBlock=*/256);
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
