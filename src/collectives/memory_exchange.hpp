// Collective exchange of one registered buffer per rank: every rank sends its RegisteredMemory to every
// peer, then receives every peer's (ascending peer order; bootstrap sends are buffered, so this cannot
// deadlock). The result has the own registration at [rank] and each peer's, mapped here, at [peer].
#pragma once

#include <vector>

#include "meshcomm/communicator.hpp"
#include "meshcomm/registered_memory.hpp"

namespace meshcomm {

// `what` names the buffer in the error thrown when a peer's memory is not mapped here (another host).
std::vector<RegisteredMemory> exchangeWithAllPeers(Communicator& comm, const RegisteredMemory& local, int tag,
                                                   const char* what);

}  // namespace meshcomm
