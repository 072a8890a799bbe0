// reduce_scratch: reduce to a root of any size in one launch: a reduce-scatter through scratch to the n-1
// non-root ranks (segment owners reduce in rank order; the root only contributes), then every owner pushes
// its reduced segment into the root's scratch and the root copies it into its output. Every rank sends
// and receives the message size once (the root receives only the results), instead of (n-1) times for a
// root that receives every input. See scratch_pipeline.cuh.
#include "collectives/algorithms/scratch_pipeline.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeReduceScratch() {
  return std::make_shared<PipelineReductionAlgorithm<PipeMode::Reduce>>("reduce_scratch", Collective::Reduce);
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
