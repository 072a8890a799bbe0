// PeerRegions (peer_regions.hpp).
#include "ep/peer_regions.hpp"

#include "collectives/memory_exchange.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::ep {

PeerRegions::PeerRegions(Comm& comm, size_t bytes, int tag, const char* what) : comm_(comm), bytes_(bytes) {
  const int rank = comm.rank();
  CudaDeviceGuard guard(comm.cudaDevice());
  Communicator& c = comm.communicator();
  local_ = GpuBuffer(bytes);  // zeroed: no flag or epoch word matches a call
  memories_ = exchangeWithAllPeers(c, c.registerMemory(local_.data(), bytes), tag, what);
  for (int p = 0; p < comm.size(); ++p) {
    MESHCOMM_REQUIRE(memories_[p].size() == bytes, "rank ", rank, ": ", what, ": rank ", p, " registered ",
                     memories_[p].size(), " bytes, this rank ", bytes,
                     " (every rank must pass the same size)");
  }
}

SpinContext PeerRegions::spin(int peer) const {
  return comm_.communicator().spinContext(peer);
}

}  // namespace meshcomm::ep
