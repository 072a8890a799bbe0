// ncclCommDestroy for communicators whose ranks share a process (ncclCommInitAll, nccl-tests -g / -t).
//
// meshcomm::Comm's destructor agrees with every peer (a bootstrap barrier) before freeing the buffers the
// peers write into. NCCL's ncclCommDestroy is local: one thread may destroy the communicators of all its
// GPUs one after the other, which would deadlock on that barrier. So a rank whose job has other ranks in
// this process is parked on destroy (after its device has drained: its operations are complete, as NCCL
// promises); when the last local rank of the job is destroyed, every parked Comm is destroyed at once, one
// thread each, and their barriers (which include the ranks of other processes) complete together. A job
// with one rank per process destroys at once. ncclCommAbort of a local rank tears it down at once (no
// barrier) and counts as handed over; the job's parked ranks are then aborted too (their barrier could
// never complete).
#pragma once

#include <memory>
#include <string>

namespace meshcomm {
class Comm;
}

namespace meshcomm::nccl {

// Destroys `comm` now or, when `localRanks` > 1, once all `localRanks` ranks of job `jobKey` in this process
// have been handed over (then all of them concurrently, before the last call returns). `abort`: tear this
// one down at once without agreeing with its peers (Comm::abort). Never throws.
void destroyWithLocalPeers(const std::string& jobKey, int localRanks, std::unique_ptr<Comm> comm, bool abort);

}  // namespace meshcomm::nccl
