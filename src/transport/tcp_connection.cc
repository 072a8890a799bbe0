#include "transport/tcp_connection.hpp"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "transport/range_check.hpp"

namespace meshcomm {

namespace {

// How long an idle receiver waits for the next header: effectively forever (shutdown() wakes it).
constexpr double kIdleWaitSec = 365.0 * 24 * 3600;
// How long an accepted but unauthenticated socket may take to present its cookie.
constexpr double kAuthWaitSec = 10.0;

size_t tcpChunkBytes() {
  const int64_t chunk = envInt("MESHCOMM_TCP_CHUNK");
  MESHCOMM_REQUIRE(chunk >= 8192 && chunk <= (int64_t{1} << 31), "MESHCOMM_TCP_CHUNK=", chunk,
                   " must be between 8192 and 2^31 bytes");
  return static_cast<size_t>(chunk);
}

double tcpTimeoutSec() {
  const int64_t sec = envInt("MESHCOMM_TCP_TIMEOUT");
  MESHCOMM_REQUIRE(sec > 0, "MESHCOMM_TCP_TIMEOUT=", sec, " must be a positive number of seconds");
  return static_cast<double>(sec);
}

// Waits for a stream when leaving its scope, also on an exception: work queued on the stream into a leased
// registration completes before the lease (declared earlier) ends. `queued` says whether anything was
// queued since the last wait: host-memory traffic makes no CUDA call at all.
class StreamDrain {
 public:
  StreamDrain(cudaStream_t stream, bool& queued) : stream_(stream), queued_(queued) {}
  ~StreamDrain() {
    if (!queued_) return;
    (void)cudaStreamSynchronize(stream_);
    queued_ = false;
  }
  StreamDrain(const StreamDrain&) = delete;
  StreamDrain& operator=(const StreamDrain&) = delete;

 private:
  cudaStream_t stream_;
  bool& queued_;
};

// Logging from a catch handler of a noexcept function must not throw again.
void logErrorQuietly(const std::string& text) noexcept {
  try {
    MESHCOMM_LOG(ERROR, text);
  } catch (...) {
  }
}

}  // namespace

// ---- PinnedStaging ---------------------------------------------------------------------------------------

PinnedStaging::PinnedStaging(int device, size_t bytes) {
  CudaDeviceGuard guard(device);
  slotBytes_ = std::max<size_t>(bytes / 2, 1);
  try {
    void* p = nullptr;
    MESHCOMM_CUDA_CHECK(cudaHostAlloc(&p, 2 * slotBytes_, cudaHostAllocPortable));
    base_ = static_cast<char*>(p);
    for (auto& e : events_) MESHCOMM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } catch (...) {
    release();
    throw;
  }
}

PinnedStaging::~PinnedStaging() {
  release();
}

void PinnedStaging::release() noexcept {
  for (auto& e : events_) {
    if (e != nullptr) (void)cudaEventDestroy(e);
    e = nullptr;
  }
  if (base_ != nullptr) (void)cudaFreeHost(base_);
  base_ = nullptr;
}

// ---- TcpConnection: lifetime -----------------------------------------------------------------------------

TcpConnection::TcpConnection(Communicator& comm, int peer, net::Fd out, net::Fd in)
    : registry_(comm.impl().registry),
      rank_(comm.rank()),
      peer_(peer),
      device_(comm.cudaDevice()),
      ioTimeoutSec_(tcpTimeoutSec()),
      out_(std::move(out)),
      in_(std::move(in)),
      sendStream_(device_),
      sendStaging_(device_, tcpChunkBytes()),
      recvStream_(device_),
      recvStaging_(device_, tcpChunkBytes()) {
  receiver_ = std::thread([this] { receiverMain(); });
}

TcpConnection::~TcpConnection() {
  closing_.store(true);
  // shutdown (not close) wakes the receiver's poll without letting the descriptor number be reused under it.
  ::shutdown(out_.get(), SHUT_RDWR);
  ::shutdown(in_.get(), SHUT_RDWR);
  if (receiver_.joinable()) receiver_.join();
  // Copies that read or fill the staging buffers must finish before the buffers are freed.
  (void)cudaStreamSynchronize(sendStream_.get());
  (void)cudaStreamSynchronize(recvStream_.get());
}

std::string TcpConnection::where() const {
  return detail::concat("rank ", rank_, ": TCP connection to peer ", peer_);
}

void TcpConnection::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (!failure_.empty()) return;
    failure_ = why;
  }
  failed_.store(true, std::memory_order_release);
  ::shutdown(out_.get(), SHUT_RDWR);
  ::shutdown(in_.get(), SHUT_RDWR);
}

void TcpConnection::throwIfFailed() const {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(failureMutex_);
  MESHCOMM_THROW(ErrorCode::RemoteError, where(), " has failed: ", failure_);
}

// ---- TcpConnection: sender -------------------------------------------------------------------------------

void TcpConnection::sendBytes(const char* data, size_t bytes, const char* what) {
  const net::Deadline deadline = net::Deadline::after(ioTimeoutSec_);
  net::IoStatus s = net::sendAll(out_.get(), data, bytes, deadline);
  if (!s.ok()) net::throwIoError(s, detail::concat(where(), ": sending ", what), deadline);
}

void TcpConnection::sendHeader(const tcpwire::Header& h) {
  const tcpwire::HeaderBytes b = tcpwire::encodeHeader(h);
  sendBytes(reinterpret_cast<const char*>(b.data()), b.size(), tcpwire::opName(h.op));
}

void TcpConnection::sendHostPayload(const char* src, uint64_t bytes) {
  // In pieces, so that MESHCOMM_TCP_TIMEOUT bounds the wait for progress, not the whole transfer.
  const size_t piece = sendStaging_.slotBytes();
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, bytes - done));
    sendBytes(src + done, n, "write payload");
    done += n;
  }
}

void TcpConnection::sendDevicePayload(const char* src, uint64_t bytes) {
  CudaDeviceGuard guard(device_);
  const size_t slotBytes = sendStaging_.slotBytes();
  const uint64_t nChunks = (bytes + slotBytes - 1) / slotBytes;
  const auto chunkLength = [&](uint64_t k) {
    return static_cast<size_t>(std::min<uint64_t>(slotBytes, bytes - k * slotBytes));
  };
  // Copies chunk k into its slot. The slot's previous chunk (k-2) has been sent: sends are synchronous.
  const auto stage = [&](uint64_t k) {
    MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(sendStaging_.slot(k), src + k * slotBytes, chunkLength(k),
                                        cudaMemcpyDeviceToHost, sendStream_.get()));
    MESHCOMM_CUDA_CHECK(cudaEventRecord(sendStaging_.event(k), sendStream_.get()));
  };
  stage(0);
  for (uint64_t k = 0; k < nChunks; ++k) {
    if (k + 1 < nChunks) stage(k + 1);
    MESHCOMM_CUDA_CHECK(cudaEventSynchronize(sendStaging_.event(k)));
    sendBytes(sendStaging_.slot(k), chunkLength(k), "write payload");
  }
}

void TcpConnection::write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src,
                          uint64_t srcOffset, uint64_t bytes) {
  internal::checkPeerDestination(label(), "write", dst, dstOffset, bytes);
  internal::checkLocalSource(label(), src, srcOffset, bytes);
  if (bytes == 0) return;
  const char* from = static_cast<const char*>(src.data()) + srcOffset;
  std::lock_guard<std::mutex> lock(sendMutex_);
  throwIfFailed();
  try {
    sendHeader({tcpwire::Op::Write, dst.id(), dstOffset, bytes});
    if (src.kind() == MemoryKind::Host) {
      sendHostPayload(from, bytes);
    } else {
      sendDevicePayload(from, bytes);
    }
  } catch (const std::exception& e) {
    fail(e.what());  // a message cut short leaves the stream out of sync: the connection is unusable
    throw;
  }
  unflushedOps_ = true;
}

void TcpConnection::updateAndSync(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) {
  internal::checkPeerDestination(label(), "updateAndSync", dst, dstOffset, sizeof(uint64_t));
  internal::checkTokenAlignment(label(), dst, dstOffset);
  std::lock_guard<std::mutex> lock(sendMutex_);
  throwIfFailed();
  try {
    sendHeader({tcpwire::Op::Update, dst.id(), dstOffset, value});
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  }
  unflushedOps_ = true;
}

uint64_t TcpConnection::requestFlush() {
  std::lock_guard<std::mutex> lock(sendMutex_);
  throwIfFailed();
  if (!unflushedOps_) return flushSeq_;  // the last Flush already covers everything sent
  try {
    sendHeader({tcpwire::Op::Flush, 0, 0, flushSeq_ + 1});
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  }
  unflushedOps_ = false;
  return ++flushSeq_;
}

void TcpConnection::readArrivedAcks() {
  while (true) {
    ssize_t n = ::recv(out_.get(), ackBuf_.data() + ackFill_, ackBuf_.size() - ackFill_, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      fail(n == 0
               ? std::string("the peer closed the connection (it exited, or its receiver rejected a request)")
               : detail::concat("reading acks: ", std::strerror(errno)));
      throwIfFailed();
    }
    ackFill_ += static_cast<size_t>(n);
    if (ackFill_ < ackBuf_.size()) continue;
    ackFill_ = 0;
    tcpwire::Header h;
    std::string why;
    const uint64_t expected = ackedSeq_.load(std::memory_order_relaxed) + 1;
    if (!tcpwire::decodeHeader(ackBuf_, &h, &why)) {
      fail("malformed ack: " + why);
    } else if (h.op != tcpwire::Op::Ack || h.value != expected) {
      fail(detail::concat("protocol error: expected ack ", expected, ", got ", tcpwire::opName(h.op), " ",
                          h.value));
    } else {
      ackedSeq_.store(expected, std::memory_order_release);
      continue;
    }
    throwIfFailed();
  }
}

bool TcpConnection::flushCompleted(uint64_t ticket) {
  if (ackedSeq_.load(std::memory_order_acquire) >= ticket) return true;
  throwIfFailed();
  std::unique_lock<std::mutex> lock(ackMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is reading acks right now
  readArrivedAcks();
  return ackedSeq_.load(std::memory_order_acquire) >= ticket;
}

void TcpConnection::flush(double requestedSec) {
  const double timeoutSec = internal::flushTimeoutSec(requestedSec);
  const uint64_t ticket = requestFlush();
  const net::Deadline deadline = net::Deadline::after(timeoutSec);
  std::lock_guard<std::mutex> lock(ackMutex_);
  while (true) {
    if (ackedSeq_.load(std::memory_order_acquire) >= ticket) return;
    throwIfFailed();
    readArrivedAcks();
    if (ackedSeq_.load(std::memory_order_acquire) >= ticket) return;
    net::IoStatus s = net::waitReady(out_.get(), POLLIN, deadline);
    if (s.result == net::IoResult::TimedOut) {
      MESHCOMM_THROW(ErrorCode::Timeout, where(), ": flush timed out after ", timeoutSec,
                     "s (peer acknowledged ", ackedSeq_.load(), " of ", ticket, " flush requests)");
    }
    if (!s.ok()) {
      fail(detail::concat("waiting for acks: ", std::strerror(s.err)));
      throwIfFailed();
    }
  }
}

bool TcpConnection::poll() {
  return flushCompleted(requestFlush());
}

// ---- TcpConnection: receiver thread ----------------------------------------------------------------------

void TcpConnection::receiverMain() noexcept {
  try {
    internal::prepareWorkerThread(device_);
    serveRequests();
  } catch (const std::exception& e) {
    if (!closing_.load()) {
      logErrorQuietly(e.what());
      try {
        fail(e.what());
      } catch (...) {
      }
    }
  } catch (...) {
    if (!closing_.load()) logErrorQuietly(where() + ": receiver stopped on an unknown exception");
  }
  // In-flight copies out of the staging buffer finish before anyone may free it.
  (void)cudaStreamSynchronize(recvStream_.get());
}

void TcpConnection::recvBytes(char* data, size_t bytes, const char* what) {
  const net::Deadline deadline = net::Deadline::after(ioTimeoutSec_);
  net::IoStatus s = net::recvAll(in_.get(), data, bytes, deadline);
  if (!s.ok()) net::throwIoError(s, detail::concat(where(), ": receiving ", what), deadline);
}

void TcpConnection::serveRequests() {
  while (true) {
    tcpwire::HeaderBytes b{};
    net::IoStatus s = net::recvAll(in_.get(), b.data(), b.size(), net::Deadline::after(kIdleWaitSec));
    if (closing_.load()) return;
    if (s.result == net::IoResult::Closed) {
      // The peer destroyed its end (or died): not an error here; later operations report it.
      MESHCOMM_LOG(INFO, where(), ": the peer closed the connection");
      fail("the peer closed the connection");
      return;
    }
    if (!s.ok()) {
      MESHCOMM_THROW(ErrorCode::RemoteError, where(), ": receiving a request failed: ",
                     s.result == net::IoResult::TimedOut ? "timed out" : std::strerror(s.err));
    }
    tcpwire::Header h;
    std::string why;
    if (!tcpwire::decodeHeader(b, &h, &why)) {
      MESHCOMM_THROW(ErrorCode::RemoteError, where(), ": malformed request from the peer: ", why);
    }
    switch (h.op) {
      case tcpwire::Op::Write:
        receiveWrite(h);
        break;
      case tcpwire::Op::Update:
        applyUpdate(h);
        break;
      case tcpwire::Op::Flush:
        answerFlush(h);
        break;
      case tcpwire::Op::Ack:
        MESHCOMM_THROW(ErrorCode::RemoteError, where(),
                       ": protocol error: an ack arrived on the request socket");
    }
  }
}

RegistrationLease TcpConnection::leaseTarget(const tcpwire::Header& h, uint64_t bytes) {
  return registry_->lease(h.memoryId, peer_, h.offset, bytes, tcpwire::opName(h.op));
}

void TcpConnection::receiveHostPayload(const RegistrationLease& target, uint64_t bytes) {
  const size_t piece = recvStaging_.slotBytes();
  for (uint64_t done = 0; done < bytes;) {
    target.throwIfRevoked();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece, bytes - done));
    recvBytes(target.target() + done, n, "write payload");
    done += n;
  }
}

void TcpConnection::receiveDevicePayload(const RegistrationLease& target, uint64_t bytes) {
  const size_t slotBytes = recvStaging_.slotBytes();
  uint64_t done = 0;
  for (uint64_t k = 0; done < bytes; ++k) {
    target.throwIfRevoked();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(slotBytes, bytes - done));
    MESHCOMM_CUDA_CHECK(cudaEventSynchronize(recvStaging_.event(k)));  // the slot's previous copy is done
    recvBytes(recvStaging_.slot(k), n, "write payload");
    recvQueued_ = true;  // before the copy: a failure after it still drains the stream
    MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(target.target() + done, recvStaging_.slot(k), n,
                                        cudaMemcpyHostToDevice, recvStream_.get()));
    MESHCOMM_CUDA_CHECK(cudaEventRecord(recvStaging_.event(k), recvStream_.get()));
    done += n;
  }
}

void TcpConnection::receiveWrite(const tcpwire::Header& h) {
  const RegistrationLease target = leaseTarget(h, h.value);
  const StreamDrain drain(recvStream_.get(),
                          recvQueued_);  // copies into the target land before the lease ends
  if (target.kind() == MemoryKind::Host) {
    receiveHostPayload(target, h.value);
  } else {
    receiveDevicePayload(target, h.value);
  }
}

void TcpConnection::applyUpdate(const tcpwire::Header& h) {
  const RegistrationLease target = leaseTarget(h, sizeof(uint64_t));
  const StreamDrain drain(recvStream_.get(), recvQueued_);  // the stream's write lands before the lease ends
  if (reinterpret_cast<uintptr_t>(target.target()) % 8 != 0) {
    MESHCOMM_THROW(ErrorCode::RemoteError, where(), ": the peer's update of memory id ", h.memoryId,
                   " offset ", h.offset, " is not 8-byte aligned; closing the connection");
  }
  if (target.kind() == MemoryKind::Host) {
    // Earlier writes may still be copying on the stream: let them land first.
    if (recvQueued_) MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(recvStream_.get()));
    recvQueued_ = false;
    __atomic_store_n(reinterpret_cast<uint64_t*>(target.target()), h.value, __ATOMIC_RELEASE);
    return;
  }
  // Same stream as the data, default flags: lands after every earlier copy, behind a fence.
  recvQueued_ = true;
  MESHCOMM_CU(cuStreamWriteValue64, recvStream_.get(), reinterpret_cast<CUdeviceptr>(target.target()),
              static_cast<cuuint64_t>(h.value), CU_STREAM_WRITE_VALUE_DEFAULT);
}

void TcpConnection::answerFlush(const tcpwire::Header& h) {
  if (recvQueued_) MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(recvStream_.get()));
  recvQueued_ = false;
  const tcpwire::HeaderBytes ack = tcpwire::encodeHeader({tcpwire::Op::Ack, 0, 0, h.value});
  const net::Deadline deadline = net::Deadline::after(ioTimeoutSec_);
  net::IoStatus s = net::sendAll(in_.get(), ack.data(), ack.size(), deadline);
  if (!s.ok()) net::throwIoError(s, where() + ": sending a flush ack", deadline);
}

// ---- setup -----------------------------------------------------------------------------------------------

namespace {

tcpwire::Cookie randomCookie() {
  tcpwire::Cookie c{};
  size_t filled = 0;
  while (filled < c.size()) {
    ssize_t n = getrandom(c.data() + filled, c.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) detail::throwSystemError(errno, "getrandom() for a TCP connection cookie");
    filled += static_cast<size_t>(n);
  }
  return c;
}

// A listening socket on the advertised interface address, described by the endpoint the peer connects to.
net::Fd listenForPeer(const std::string& where, tcpwire::Endpoint* endpoint) {
  net::SockAddr addr = net::advertisedAddress();
  addr.setPort(0);
  net::Fd fd;
  if (int err = net::tryListen(addr, &fd); err != 0) {
    detail::throwSystemError(err, where + ": listening on " + addr.toString());
  }
  const net::SockAddr bound = net::localAddress(fd.get());
  endpoint->family = static_cast<uint16_t>(bound.family());
  endpoint->port = bound.port();
  endpoint->address = bound.addressBytes();
  endpoint->cookie = randomCookie();
  return fd;
}

// Accepts connections until one proves it is `peer` with `cookie`; anything else is dropped with a warning.
net::Fd acceptPeer(int listenFd, int peer, const tcpwire::Cookie& cookie, const net::Deadline& deadline,
                   const std::string& where) {
  while (true) {
    net::IoStatus ready = net::waitReady(listenFd, POLLIN, deadline);
    if (ready.result == net::IoResult::TimedOut) {
      MESHCOMM_THROW(ErrorCode::Timeout, where, ": the peer did not connect within ",
                     net::formatSeconds(deadline.budgetSeconds()), " (MESHCOMM_BOOTSTRAP_TIMEOUT)");
    }
    if (!ready.ok()) detail::throwSystemError(ready.err, where + ": waiting for the peer to connect");
    net::SockAddr remote;
    int err = 0;
    net::Fd fd = net::acceptConnection(listenFd, &remote, &err);
    if (!fd.valid()) {
      if (err != 0 && err != ECONNABORTED) detail::throwSystemError(err, where + ": accept()");
      continue;
    }
    std::array<uint8_t, tcpwire::kAuthBytes> bytes{};
    const double left = std::chrono::duration<double>(deadline.when() - net::Deadline::Clock::now()).count();
    net::IoStatus s = net::recvAll(fd.get(), bytes.data(), bytes.size(),
                                   net::Deadline::after(std::max(0.0, std::min(kAuthWaitSec, left))));
    tcpwire::Auth auth;
    if (s.ok() && tcpwire::decodeAuth(bytes, &auth) && auth.rank == peer &&
        tcpwire::cookiesEqual(auth.cookie, cookie)) {
      return fd;
    }
    MESHCOMM_LOG(WARN, where, ": rejected a connection from ", remote.toString(),
                 " that did not present the peer's cookie");
  }
}

}  // namespace

namespace internal {

std::shared_ptr<Connection> makeTcpConnection(Communicator& comm, int peer, int tag) {
  exchangeHello(comm, peer, tag, Transport::Tcp);
  requireStreamWriteValue64(comm.rank(), comm.cudaDevice());  // the receiver applies updates with it
  const int rank = comm.rank();
  const std::string where = detail::concat("rank ", rank, ": TCP connect(peer ", peer, ", tag ", tag, ")");
  const net::Deadline deadline =
      net::Deadline::after(static_cast<double>(envInt("MESHCOMM_BOOTSTRAP_TIMEOUT")));

  tcpwire::Endpoint mine;
  net::Fd listener = listenForPeer(where, &mine);
  // The bootstrap is authenticated, so the cookies it carries prove who connects to the listeners below.
  const auto mineBytes = tcpwire::encodeEndpoint(mine);
  std::array<uint8_t, tcpwire::kEndpointBytes> theirsBytes{};
  const int setupTag =
      internal::internalTag(internal::TagSpace::TcpConnection, tag, "TCP connect", rank, peer);
  comm.bootstrap().send(mineBytes.data(), mineBytes.size(), peer, setupTag);
  comm.bootstrap().recv(theirsBytes.data(), theirsBytes.size(), peer, setupTag);
  tcpwire::Endpoint theirs;
  if (!tcpwire::decodeEndpoint(theirsBytes, &theirs)) {
    MESHCOMM_THROW(ErrorCode::RemoteError, where, ": the peer sent a malformed endpoint");
  }

  // Connect first (the peer's kernel completes it from the listen backlog), then accept the peer's socket.
  const net::SockAddr peerAddr = net::SockAddr::fromBytes(theirs.family, theirs.address, theirs.port);
  net::Fd out = net::connectTo(peerAddr, deadline, net::ConnectRetry::UntilDeadline, where);
  const auto auth = tcpwire::encodeAuth({rank, theirs.cookie});
  net::IoStatus s = net::sendAll(out.get(), auth.data(), auth.size(), deadline);
  if (!s.ok()) net::throwIoError(s, where + ": sending the connection cookie", deadline);
  net::Fd in = acceptPeer(listener.get(), peer, mine.cookie, deadline, where);
  MESHCOMM_LOG(DEBUG, where, ": connected to ", peerAddr.toString());
  return std::make_shared<TcpConnection>(comm, peer, std::move(out), std::move(in));
}

}  // namespace internal
}  // namespace meshcomm
