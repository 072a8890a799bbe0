// TCP connection: for peers on other hosts (or any peer with MESHCOMM_TRANSPORT=tcp). Two sockets, one per
// direction, each authenticated at setup by a random 128-bit cookie exchanged over the bootstrap:
// - out_ carries this rank's requests (Write/Update/Flush, tcp_wire.hpp); the peer's Acks come back on it;
// - in_ carries the peer's requests, served by the receiver thread, which answers Flushes with Acks.
//
// Sender (write/updateAndSync/flush, normally the proxy thread): device-memory payloads are staged through a
// pinned buffer, chunk by chunk, double-buffered (copy of chunk k+1 overlaps the send of chunk k).
// Receiver thread: checks every header against this rank's live registrations before touching memory: the
// id must be registered here and sent to this peer (sendMemory), the range inside it. It leases the
// registration for the transfer (deregistering waits for the lease, and revokes it at the next chunk);
// receives device-bound payloads into a pinned buffer and copies them on its own stream; updates go on the
// same stream after the data; the stream is drained before the lease ends; a flush synchronises that
// stream, then acks. Any protocol or range violation closes both sockets, so the peer's next operation or
// flush fails.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "bootstrap/socket.hpp"
#include "meshcomm/communicator.hpp"
#include "meshcomm/connection.hpp"
#include "core/registered_memory_impl.hpp"
#include "transport/tcp_wire.hpp"
#include "transport/transport_common.hpp"

namespace meshcomm {

// A pinned host buffer split into two slots, each with an event that completes when the last copy using the
// slot has finished: one slot is filled or drained by the socket while the other is copied.
class PinnedStaging {
 public:
  PinnedStaging(int device, size_t bytes);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  size_t slotBytes() const { return slotBytes_; }
  char* slot(uint64_t i) const { return base_ + (i & 1) * slotBytes_; }
  cudaEvent_t event(uint64_t i) const { return events_[i & 1]; }

 private:
  void release() noexcept;

  char* base_ = nullptr;
  size_t slotBytes_ = 0;
  std::array<cudaEvent_t, 2> events_{};
};

class TcpConnection final : public Connection, public internal::AsyncFlushConnection {
 public:
  // Takes the two authenticated sockets and starts the receiver thread.
  TcpConnection(Communicator& comm, int peer, net::Fd out, net::Fd in);
  // Shuts both sockets down (the peer's receiver sees EOF), joins the receiver, frees the staging buffers.
  ~TcpConnection() override;
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  Transport transport() const override { return Transport::Tcp; }
  int remoteRank() const override { return peer_; }

  void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
             uint64_t bytes) override;
  void updateAndSync(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) override;
  void flush(double timeoutSec = -1) override;
  bool poll() override;

  uint64_t requestFlush() override;
  bool flushCompleted(uint64_t ticket) override;

 private:
  internal::ConnectionLabel label() const { return {Transport::Tcp, rank_, peer_}; }

  // ---- sender side (requires sendMutex_) ----
  void sendHeader(const tcpwire::Header& h);
  void sendBytes(const char* data, size_t bytes, const char* what);
  void sendDevicePayload(const char* src, uint64_t bytes);
  void sendHostPayload(const char* src, uint64_t bytes);
  // Reads the acks that have arrived, without blocking (requires ackMutex_).
  void readArrivedAcks();

  // ---- receiver thread ----
  void receiverMain() noexcept;
  void serveRequests();
  void receiveWrite(const tcpwire::Header& h);
  void receiveHostPayload(const RegistrationLease& target, uint64_t bytes);
  void receiveDevicePayload(const RegistrationLease& target, uint64_t bytes);
  void applyUpdate(const tcpwire::Header& h);
  void answerFlush(const tcpwire::Header& h);
  // Holds the local registration an incoming header addresses for the transfer; throws (RemoteError) if the
  // id is not live here, was never sent to this peer, or the range does not fit.
  RegistrationLease leaseTarget(const tcpwire::Header& h, uint64_t bytes);
  void recvBytes(char* data, size_t bytes, const char* what);

  // ---- failure ----
  // Records the first failure, and closes both directions so that both sides' pending operations fail.
  void fail(const std::string& why);
  void throwIfFailed() const;
  std::string where() const;

  // This rank's live registrations (shared, so the receiver never outlives them even if the Communicator
  // goes).
  const std::shared_ptr<LocalRegistry> registry_;
  const int rank_;
  const int peer_;
  const int device_;
  const double ioTimeoutSec_;  // MESHCOMM_TCP_TIMEOUT: longest wait for progress of one chunk
  net::Fd out_;
  net::Fd in_;

  // Sender.
  std::mutex sendMutex_;  // one message (header + payload) at a time on out_
  internal::OwnedStream sendStream_;
  PinnedStaging sendStaging_;
  uint64_t flushSeq_ = 0;      // sequence number of the last Flush sent
  bool unflushedOps_ = false;  // operations sent since that Flush

  // Acks (read from out_ by whichever thread waits for them).
  std::mutex ackMutex_;
  tcpwire::HeaderBytes ackBuf_{};
  size_t ackFill_ = 0;
  std::atomic<uint64_t> ackedSeq_{0};

  // Receiver.
  internal::OwnedStream recvStream_;
  bool recvQueued_ = false;  // receiver thread: work queued on recvStream_ since its last synchronisation
  PinnedStaging recvStaging_;
  std::thread receiver_;

  std::atomic<bool> closing_{false};  // set by the destructor: EOF is then expected
  std::atomic<bool> failed_{false};
  mutable std::mutex failureMutex_;
  std::string failure_;
};

}  // namespace meshcomm
