// CUDA IPC connection: the peer's memory is mapped into this process (RegisteredMemory::data() of the remote
// registration), so a write is a copy-engine cudaMemcpyAsync on the connection's own non-blocking stream and
// updateAndSync is a cuStreamWriteValue64 on that stream; stream order puts the token after the data, and the
// write's default flags add a system-scope fence before it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "meshcomm/connection.hpp"
#include "transport/transport_common.hpp"

namespace meshcomm {

class CudaIpcConnection final : public Connection, public internal::AsyncFlushConnection {
 public:
  CudaIpcConnection(int rank, int peer, int cudaDevice);
  ~CudaIpcConnection() override;
  CudaIpcConnection(const CudaIpcConnection&) = delete;
  CudaIpcConnection& operator=(const CudaIpcConnection&) = delete;

  Transport transport() const override { return Transport::CudaIpc; }
  int remoteRank() const override { return peer_; }

  void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
             uint64_t bytes) override;
  void updateAndSync(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) override;
  void flush(double timeoutSec = -1) override;
  bool poll() override;

  uint64_t requestFlush() override;
  bool flushCompleted(uint64_t ticket) override;

 private:
  // A recorded event that completes when the first `ticket` operations have completed.
  struct PendingTicket {
    uint64_t ticket;
    cudaEvent_t event;
  };

  internal::ConnectionLabel label() const { return {Transport::CudaIpc, rank_, peer_}; }
  void checkMapped(const char* op, const RegisteredMemory& dst) const;
  // Both require mutex_.
  bool queryStreamDone();
  void retireTicketsUpTo(uint64_t completed);
  cudaEvent_t takeEvent();

  const int rank_;
  const int peer_;
  const int device_;
  internal::OwnedStream stream_;

  std::mutex
      mutex_;  // the proxy thread and host threads (Host2DeviceSemaphore::signal) may share a connection
  uint64_t issued_ = 0;      // operations enqueued on stream_ so far
  uint64_t completed_ = 0;   // a lower bound of the operations known to have completed
  uint64_t lastTicket_ = 0;  // the newest ticket handed out (tickets are counts of issued operations)
  std::deque<PendingTicket> pending_;  // ascending tickets, one event each
  std::vector<cudaEvent_t> spareEvents_;
};

}  // namespace meshcomm
