#include "collectives/memory_exchange.hpp"

#include "meshcomm/errors.hpp"

namespace meshcomm {

std::vector<RegisteredMemory> exchangeWithAllPeers(Communicator& comm, const RegisteredMemory& local, int tag,
                                                   const char* what) {
  const int rank = comm.rank(), n = comm.size();
  std::vector<RegisteredMemory> byRank(n);
  byRank[rank] = local;
  for (int p = 0; p < n; ++p)
    if (p != rank) comm.sendMemory(local, p, tag);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    byRank[p] = comm.recvMemory(p, tag);
    MESHCOMM_REQUIRE(byRank[p].isMapped(), "rank ", rank, ": ", what, " of peer ", p, " is not mapped here");
  }
  return byRank;
}

}  // namespace meshcomm
