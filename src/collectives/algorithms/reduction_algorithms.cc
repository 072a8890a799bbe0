// Registration of the built-in reduction algorithms (allreduce, reduce_scatter, reduce). Within a
// collective, registration order is the selector's fallback preference: the LL (latency) algorithm first,
// then the pipelined ones (any size), so a call too large for an LL packet region falls through;
// allreduce_zerocopy last (it runs registered buffers only, named by a table rule).
#include "collectives/algorithms/reduction_common.hpp"
#include "collectives/builtin.hpp"

namespace meshcomm::builtin {

void registerReductionAlgorithms(AlgorithmCollection& collection) {
  collection.add(reduction::makeAllreduceOneshotLL());
  collection.add(reduction::makeAllreduceTwoshotLL());
  collection.add(reduction::makeAllreduceRsag());
  collection.add(reduction::makeAllreduceZeroCopy());
  collection.add(reduction::makeReduceScatterLL());
  collection.add(reduction::makeReduceScatterScratch());
  collection.add(reduction::makeReduceDirect());
  collection.add(reduction::makeReduceChain());
  collection.add(reduction::makeReduceScratch());
}

}  // namespace meshcomm::builtin
