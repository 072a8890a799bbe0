// The phases of a point-to-point group: where a send reads bytes that an earlier receive of the same group
// writes (a read after write, as in a step-by-step hypercube or recursive-doubling exchange written as one
// group), the group runs as consecutive launches, so the send sees the received bytes (program order).
// NCCL runs a group's operations concurrently and leaves such a send's data undefined.
//
// A split is made only when every peer's operations (both directions, the rank itself included) fall in
// one phase: then each pair still exchanges in exactly one launch per side, as in an unsplit group, so the
// pair protocols (count headers, epochs) see what they always do, whatever the peer's own split. Otherwise
// (a peer in two phases) the group stays one launch, with NCCL's semantics.
//
// A split orders this rank's launches; ranks whose splits wait on each other in a cycle (each forwarding
// to the next what it receives from the previous, in one group) wait until the device timeout, which
// reports the operation: such a group's data is undefined under NCCL's semantics too.
#pragma once

#include <cstddef>
#include <vector>

#include "meshcomm/algorithm.hpp"

namespace meshcomm {

// Where the phases after the first begin: the index in `ops` (counts in bytes, call order) of each later
// phase's first operation; empty when the group runs as one launch (no allocation then: a group whose
// sends and receives lie in disjoint address spans is decided in one pass). Peers must lie in [0, nRanks).
std::vector<size_t> p2pPhaseBoundaries(const P2POp* ops, size_t count, int nRanks);

}  // namespace meshcomm
