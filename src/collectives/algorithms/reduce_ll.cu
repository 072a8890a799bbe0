// reduce_ll: small reduce to a root: every non-root rank writes its whole input as LL16 packets into its
// slot of the root's packet region; the root (the only owner) reduces all ranks in rank order (its own
// input read locally) into its output. Non-root ranks exchange one-pack tokens so that every rank hears
// from every peer in every call (the packet-half reuse argument). Small messages (default up to 256 KiB,
// capped by the packet budget). See ll_reduce.cuh.
#include "collectives/algorithms/ll_reduce.cuh"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeReduceLL() {
  return std::make_shared<LLReductionAlgorithm<LLMode::Reduce>>("reduce_ll", Collective::Reduce,
                                                                /*maxBytes=*/256 << 10,
                                                                /*budgetFraction=*/0.0625,
                                                                /*packsPerBlock=*/256);
}

}  // namespace meshcomm::reduction
