// builtinAlgorithms(): the reduction family, then the data-movement family (src/collectives/builtin.hpp).
#include "collectives/builtin.hpp"

#include "meshcomm/builtin_algorithms.hpp"

namespace meshcomm {

AlgorithmCollection builtinAlgorithms() {
  AlgorithmCollection collection;
  builtin::registerReductionAlgorithms(collection);
  builtin::registerMovementAlgorithms(collection);
  return collection;
}

}  // namespace meshcomm
