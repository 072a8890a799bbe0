// PeerRegions: one registered device region per rank of a Comm, mapped by every peer, with the spin
// contexts that name each peer in device timeouts. Shared by EpBuffer and LowLatencyBuffer.
#pragma once

#include <cstddef>
#include <vector>

#include "meshcomm/comm.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/ep/ep_buffer.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/registered_memory.hpp"

namespace meshcomm::ep {

class PeerRegions {
 public:
  // Collective over `comm` (at most kMaxRanks ranks): allocates `bytes` of zeroed device memory, registers it
  // and maps every peer's (each must pass the same size; a mismatch names the peer). `what` and `tag` name
  // and separate the exchange. `blocks` is the launch size of the kernels that will spin on the regions:
  // checked against the GPU's multiprocessors, since every block must be resident.
  PeerRegions(Comm& comm, size_t bytes, int blocks, int tag, const char* what);

  // Every rank's mapped region and spin context, as the kernels' views hold them.
  void fill(char* (&regions)[kMaxRanks], SpinContext (&spin)[kMaxRanks]) const;

  char* region(int rank) const { return static_cast<char*>(memories_[rank].data()); }  // own at comm.rank()
  char* local() const { return static_cast<char*>(local_.data()); }
  // The registration of `rank`'s region as this rank holds it (its own, or the peer's as received).
  const RegisteredMemory& memory(int rank) const { return memories_[rank]; }
  SpinContext spin(int peer) const;
  size_t bytes() const { return bytes_; }

 private:
  Comm& comm_;
  size_t bytes_;
  GpuBuffer local_;
  std::vector<RegisteredMemory> memories_;  // [rank]
};

}  // namespace meshcomm::ep
