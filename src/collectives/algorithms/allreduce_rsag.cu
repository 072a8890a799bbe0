// allreduce_rsag: large allreduce of any size in one launch, pipelined through the shared scratch:
// contributions pushed into the segment owners' scratch, owners reduce in rank order and push the result
// into every peer's scratch, peers copy it out; double-buffered rounds, one channel per block.
// See scratch_pipeline.cuh for the data flow, signals and scratch-reuse argument.
#include "collectives/algorithms/scratch_pipeline.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeAllreduceRsag() {
  return std::make_shared<PipelineReductionAlgorithm<PipeMode::AllReduce>>("allreduce_rsag",
                                                                           Collective::AllReduce);
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
