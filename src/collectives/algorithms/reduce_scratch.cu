// reduce_scratch: reduce to a root of any size in one launch: a reduce-scatter through scratch (segment
// owners reduce in rank order), then every non-root owner pushes its reduced segment into the root's
// scratch and the root copies it into its output. The root's ingress is 2(n-1)/n of the message, like an
// allreduce, instead of (n-1) times for a root that receives every input. See scratch_pipeline.cuh.
#include "collectives/algorithms/scratch_pipeline.cuh"

namespace meshcomm::reduction {

std::shared_ptr<Algorithm> makeReduceScratch() {
  return std::make_shared<PipelineReductionAlgorithm<PipeMode::Reduce>>("reduce_scratch", Collective::Reduce);
}

}  // namespace meshcomm::reduction
