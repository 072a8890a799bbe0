// PeerRegions (peer_regions.hpp).
#include "ep/peer_regions.hpp"

#include "collectives/memory_exchange.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::ep {

PeerRegions::PeerRegions(Comm& comm, size_t bytes, int blocks, int tag, const char* what)
    : comm_(comm), bytes_(bytes) {
  const int rank = comm.rank();
  MESHCOMM_REQUIRE(comm.size() <= kMaxRanks, "rank ", rank, ": ", what, ": ", comm.size(),
                   " ranks; expert-parallel communication runs on at most ", kMaxRanks, " ranks of one node");
  CudaDeviceGuard guard(comm.cudaDevice());
  int sms = 0;
  MESHCOMM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, comm.cudaDevice()));
  MESHCOMM_REQUIRE(blocks >= 1 && blocks <= sms, "rank ", rank, ": ", what, ": ", blocks,
                   " blocks; 1 to the GPU's ", sms,
                   " multiprocessors (every block spins, so all must be resident)");
  Communicator& c = comm.communicator();
  local_ = GpuBuffer(bytes);  // zeroed: no flag or epoch word matches a call
  memories_ = exchangeWithAllPeers(c, c.registerMemory(local_.data(), bytes), tag, what);
  for (int p = 0; p < comm.size(); ++p) {
    MESHCOMM_REQUIRE(memories_[p].size() == bytes, "rank ", rank, ": ", what, ": rank ", p, " registered ",
                     memories_[p].size(), " bytes, this rank ", bytes,
                     " (every rank must pass the same size)");
  }
}

void PeerRegions::fill(char* (&regions)[kMaxRanks], SpinContext (&spin)[kMaxRanks]) const {
  for (int p = 0; p < comm_.size(); ++p) {
    regions[p] = region(p);
    spin[p] = this->spin(p);
  }
}

SpinContext PeerRegions::spin(int peer) const {
  return comm_.communicator().spinContext(peer);
}

}  // namespace meshcomm::ep
