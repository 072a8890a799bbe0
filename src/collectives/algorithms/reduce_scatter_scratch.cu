// reduce_scatter_scratch: reduce-scatter of any size in one launch: every rank pushes input chunk p into
// rank p's scratch (double-buffered rounds, one channel per block); rank p reduces in rank order (its own
// chunk from local memory) into its output. See scratch_pipeline.cuh.
#include "collectives/algorithms/scratch_pipeline.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeReduceScatterScratch() {
  return std::make_shared<PipelineReductionAlgorithm<PipeMode::ReduceScatter>>("reduce_scatter_scratch",
                                                                               Collective::ReduceScatter);
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
