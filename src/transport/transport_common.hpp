// Pieces both transports share: the pair handshake that opens every connection, the asynchronous-flush
// seam the proxy uses, an owned CUDA stream, and argument checks with uniform error messages.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "meshcomm/communicator.hpp"
#include "meshcomm/connection.hpp"
#include "meshcomm/registered_memory.hpp"

namespace meshcomm::internal {

// A connection whose flush splits into a request and a non-blocking completion check, so that a proxy keeps
// serving other channels while one flush drains (a blocking flush would serialise the whole proxy).
class AsyncFlushConnection {
 public:
  virtual ~AsyncFlushConnection() = default;
  // A ticket that completes once every operation issued on this connection before the call has completed.
  virtual uint64_t requestFlush() = 0;
  // Non-blocking: true once `ticket` has completed. Throws if the connection has failed.
  virtual bool flushCompleted(uint64_t ticket) = 0;
};

// (pair) The first exchange of every connection, for both transports on one tag (so that a transport
// mismatch is reported instead of leaving each side waiting on a different tag): both sides send {rank, peer,
// transport, host id, device} on internalTag(TagSpace::CudaIpcConnection, tag) and check the peer's. Throws
// Error(RemoteError) naming rank, peer and tag when the peer chose another transport (e.g. MESHCOMM_TRANSPORT
// differs between ranks), believes it talks to another rank, or, for CUDA IPC, runs on another host.
void exchangeHello(Communicator& comm, int peer, int tag, Transport transport);

// The deadline of a flush called with `timeoutSec` (< 0: MESHCOMM_FLUSH_TIMEOUT, which must be positive).
double flushTimeoutSec(double timeoutSec);

// An owned non-blocking stream on one device (never the legacy stream, so it never serialises with user
// work).
class OwnedStream {
 public:
  explicit OwnedStream(int device);
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Prepares a thread meshcomm owns (proxy, TCP receiver) for CUDA work: makes `device` current and exempts
// the thread from other threads' global-mode stream captures (cudaThreadExchangeStreamCaptureMode relaxed),
// so a user capturing a graph elsewhere neither breaks nor is broken by its stream queries and copies.
void prepareWorkerThread(int device);

// Throws Error(CudaError) naming rank and device when `device` cannot run cuStreamWriteValue64, which both
// transports use for updateAndSync (checked once per connection, at setup, rather than at the first signal).
void requireStreamWriteValue64(int rank, int device);

// Argument checks of Connection::write/updateAndSync. `op` is "write" or "updateAndSync"; messages name the
// rank, the peer, the memory (owner, id, size) and the offending range.
struct ConnectionLabel {
  Transport transport;
  int rank;
  int peer;
};
// `dst` must be the peer's memory and hold [offset, offset+bytes).
void checkPeerDestination(const ConnectionLabel& c, const char* op, const RegisteredMemory& dst,
                          uint64_t offset, uint64_t bytes);
// `src` must be this rank's memory and hold [offset, offset+bytes).
void checkLocalSource(const ConnectionLabel& c, const RegisteredMemory& src, uint64_t offset, uint64_t bytes);
// The 8-byte word at `offset` must be 8-byte aligned (stream memory operations need it).
void checkTokenAlignment(const ConnectionLabel& c, const RegisteredMemory& dst, uint64_t offset);

}  // namespace meshcomm::internal
