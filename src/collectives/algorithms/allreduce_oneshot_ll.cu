// allreduce_oneshot_ll: every rank writes its whole input as LL16 packets into its slot of every peer's
// packet region; every rank reduces all ranks' data in rank order (its own input read locally). One kernel,
// no semaphores: latency = one packet hop. Small messages (default up to 256 KiB). See ll_reduce.cuh.
#include "collectives/algorithms/ll_reduce.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeAllreduceOneshotLL() {
  return std::make_shared<LLReductionAlgorithm<LLMode::OneShot>>(
      "allreduce_oneshot_ll", Collective::AllReduce,
      /*maxBytes=*/256 << 10, /*budgetFraction=*/0.125,
      /*packsPerBlock=*/512);
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
