// Registration of the data-movement algorithms. Within a collective, registration order is the selector's
// fallback preference: LL first (it declines calls larger than its packet slot), then scratch. sendrecv_ll
// and alltoallv_ll never decline for size (their large pairs run in the engine inside them): for these
// rank-local sizes the choice must not depend on size (selector.cc), so they are first for every call.
#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/builtin.hpp"

namespace meshcomm::builtin {

void registerMovementAlgorithms(AlgorithmCollection& collection) {
  collection.add(movement::makeAllGatherLL());
  collection.add(movement::makeAllGatherScratch());
  collection.add(movement::makeAllToAllLL());
  collection.add(movement::makeAllToAllScratch());
  collection.add(movement::makeAllToAllvLL());
  collection.add(movement::makeAllToAllvScratch());
  collection.add(movement::makeBroadcastLL());
  collection.add(movement::makeBroadcastScratch());
  collection.add(movement::makeBroadcastChain());
  collection.add(movement::makeGatherLL());
  collection.add(movement::makeGatherScratch());
  collection.add(movement::makeScatterLL());
  collection.add(movement::makeScatterScratch());
  collection.add(movement::makeSendRecvLL());
  collection.add(movement::makeSendRecvScratch());
  // Last: each reserves an LL stream region ([2][n][512 KiB + header], 16 MiB at n = 8) of what the packet
  // buffer has left, after alltoallv_ll's and sendrecv_ll's, whose capacity they must not shrink.
  collection.add(movement::makeGatherStream());
  collection.add(movement::makeScatterStream());
  collection.add(movement::makeBarrierChannels());
}

}  // namespace meshcomm::builtin
