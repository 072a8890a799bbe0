// Factories of the built-in data-movement algorithms (each defined in its own file of this folder);
// builtin::registerMovementAlgorithms (movement_algorithms.cc) registers them in preference order.
#pragma once

#include <memory>

#include "meshcomm/algorithm.hpp"

namespace meshcomm::movement {

std::shared_ptr<Algorithm> makeAllGatherLL();       // allgather_ll.cu
std::shared_ptr<Algorithm> makeAllGatherScratch();  // allgather_scratch.cu
std::shared_ptr<Algorithm> makeAllToAllLL();        // alltoall_ll.cu
std::shared_ptr<Algorithm> makeAllToAllScratch();   // alltoall_scratch.cu
std::shared_ptr<Algorithm> makeAllToAllvLL();       // ll_stream.cu
std::shared_ptr<Algorithm> makeAllToAllvScratch();  // alltoall_scratch.cu
std::shared_ptr<Algorithm> makeBroadcastLL();       // rooted_ll.cu
std::shared_ptr<Algorithm> makeBroadcastScratch();  // broadcast_scratch.cu
std::shared_ptr<Algorithm> makeBroadcastChain();    // broadcast_scratch.cu
std::shared_ptr<Algorithm> makeGatherLL();          // rooted_ll.cu
std::shared_ptr<Algorithm> makeGatherScratch();     // gather_scratch.cu
std::shared_ptr<Algorithm> makeGatherStream();      // ll_stream.cu
std::shared_ptr<Algorithm> makeScatterLL();         // rooted_ll.cu
std::shared_ptr<Algorithm> makeScatterScratch();    // scatter_scratch.cu
std::shared_ptr<Algorithm> makeScatterStream();     // ll_stream.cu
std::shared_ptr<Algorithm> makeSendRecvLL();        // ll_stream.cu
std::shared_ptr<Algorithm> makeSendRecvScratch();   // sendrecv_scratch.cu
std::shared_ptr<Algorithm> makeBarrierChannels();   // barrier_channels.cu

}  // namespace meshcomm::movement
