// Registration of the built-in algorithms. Order matters: within a collective, registration order is
// the selector's fallback preference. Each family registers from its own file.
#pragma once

#include "meshcomm/algorithm.hpp"

namespace meshcomm::builtin {

// allreduce, reduce_scatter, reduce (src/collectives/algorithms/reduction_algorithms.cc)
void registerReductionAlgorithms(AlgorithmCollection& collection);
// allgather, alltoall, alltoallv, broadcast, gather, scatter, sendrecv, barrier
// (src/collectives/algorithms/movement_algorithms.cc)
void registerMovementAlgorithms(AlgorithmCollection& collection);

}  // namespace meshcomm::builtin
