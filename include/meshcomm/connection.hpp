// Connection: the host-driven data path between this rank and one peer, used by proxies (PortChannel)
// and by host-signalled semaphores. Operations on one connection complete in the order they are issued.
#pragma once

#include <cstdint>
#include <string>

#include "meshcomm/registered_memory.hpp"

namespace meshcomm {

enum class Transport : uint8_t {
  CudaIpc = 1,  // same host: peer memory mapped; copies by the copy engine
  Tcp = 2,      // any host: bytes over a socket, written into the peer's memory by its receiver thread
};

const char* transportName(Transport t);

class Connection {
 public:
  virtual ~Connection() = default;
  virtual Transport transport() const = 0;
  virtual int remoteRank() const = 0;

  // Copies `bytes` from local `src`+srcOffset to the peer's `dst`+dstOffset, asynchronously. Ranges are
  // checked against the registrations (error names rank, peer and the offending range).
  virtual void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src,
                     uint64_t srcOffset, uint64_t bytes) = 0;
  // Sets the 8-byte word at peer `dst`+dstOffset to `value` once every earlier write of this connection
  // has landed (the write-then-signal order a semaphore needs).
  virtual void updateAndSync(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) = 0;
  // Blocks until every earlier operation has completed at the destination, for at most timeoutSec seconds
  // (< 0: MESHCOMM_FLUSH_TIMEOUT); a timeout throws Error(Timeout) naming rank and peer.
  virtual void flush(double timeoutSec = -1) = 0;
  // Non-blocking: true when every earlier operation has completed.
  virtual bool poll() = 0;
};

}  // namespace meshcomm
