#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::net {

// ---- Fd, Deadline ----------------------------------------------------------------------------------------

void Fd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released even then.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Deadline Deadline::after(double seconds) {
  Deadline d;
  d.budget_ = seconds;
  // Clamped to ten years so that absurd timeouts cannot overflow the clock's 64-bit nanoseconds.
  double clamped = std::min(seconds, 10.0 * 365 * 24 * 3600);
  d.when_ =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(clamped));
  return d;
}

int Deadline::pollTimeoutMs() const {
  auto left = when_ - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

std::string formatSeconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", seconds);
  return buf;
}

// ---- SockAddr --------------------------------------------------------------------------------------------

SockAddr SockAddr::fromSockaddr(const sockaddr* sa, socklen_t len) {
  SockAddr a;
  if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "unsupported socket address family ", sa->sa_family);
  }
  len = std::min<socklen_t>(len, sizeof(a.storage_));
  std::memcpy(&a.storage_, sa, len);
  a.length_ = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  return a;
}

SockAddr SockAddr::fromBytes(int family, const std::array<uint8_t, 16>& address, uint16_t port) {
  SockAddr a;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.storage_);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, address.data(), 4);
    a.length_ = sizeof(sockaddr_in);
  } else if (family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, address.data(), 16);
    a.length_ = sizeof(sockaddr_in6);
  } else {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "unsupported address family ", family,
                   " (expected IPv4 or IPv6)");
  }
  a.setPort(port);
  return a;
}

SockAddr SockAddr::resolve(const std::string& host, uint16_t port) {
  std::array<uint8_t, 16> bytes{};
  if (inet_pton(AF_INET, host.c_str(), bytes.data()) == 1) return fromBytes(AF_INET, bytes, port);
  if (inet_pton(AF_INET6, host.c_str(), bytes.data()) == 1) return fromBytes(AF_INET6, bytes, port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "cannot resolve host '", host, "': ", gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, freeaddrinfo);
  const addrinfo* chosen = nullptr;
  for (const addrinfo* ai = found; ai; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      chosen = ai;  // IPv4 first, so that every rank resolving the same name picks the same family
      break;
    }
    if (ai->ai_family == AF_INET6 && !chosen) chosen = ai;
  }
  if (!chosen) MESHCOMM_THROW(ErrorCode::InvalidUsage, "host '", host, "' has no IPv4 or IPv6 address");
  SockAddr a = fromSockaddr(chosen->ai_addr, chosen->ai_addrlen);
  a.setPort(port);
  return a;
}

SockAddr SockAddr::parse(const std::string& hostPort) {
  std::string host;
  size_t colon;
  if (!hostPort.empty() && hostPort.front() == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string::npos || close + 1 >= hostPort.size() || hostPort[close + 1] != ':') {
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "address '", hostPort, "' is not of the form [ipv6]:port");
    }
    host = hostPort.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = hostPort.rfind(':');
    if (colon == std::string::npos || hostPort.find(':') != colon) {
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "address '", hostPort,
                     "' is not of the form host:port (write IPv6 addresses as [addr]:port)");
    }
    host = hostPort.substr(0, colon);
  }
  std::string portText = hostPort.substr(colon + 1);
  bool digits = !portText.empty() && portText.size() <= 5 &&
                std::all_of(portText.begin(), portText.end(), [](char c) { return c >= '0' && c <= '9'; });
  long port = digits ? std::stol(portText) : 0;
  if (host.empty() || port < 1 || port > 65535) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "address '", hostPort, "' needs a host and a port in 1-65535");
  }
  return resolve(host, static_cast<uint16_t>(port));
}

SockAddr SockAddr::loopbackV4(uint16_t port) {
  std::array<uint8_t, 16> bytes{127, 0, 0, 1};
  return fromBytes(AF_INET, bytes, port);
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

bool SockAddr::isLoopback() const {
  auto bytes = addressBytes();
  if (family() == AF_INET) return bytes[0] == 127;
  if (family() != AF_INET6) return false;
  const auto* a6 = &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && bytes[12] == 127);
}

std::array<uint8_t, 16> SockAddr::addressBytes() const {
  std::array<uint8_t, 16> bytes{};
  if (family() == AF_INET)
    std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, 4);
  if (family() == AF_INET6) {
    std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, 16);
  }
  return bytes;
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  auto bytes = addressBytes();
  if (family() == AF_INET || family() == AF_INET6) inet_ntop(family(), bytes.data(), buf, sizeof(buf));
  return buf;
}

std::string SockAddr::toString() const {
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

// ---- errors ----------------------------------------------------------------------------------------------

void throwIoError(const IoStatus& status, const std::string& what, const Deadline& deadline) {
  switch (status.result) {
    case IoResult::TimedOut:
      MESHCOMM_THROW(ErrorCode::Timeout, what, " timed out after ", formatSeconds(deadline.budgetSeconds()));
    case IoResult::Closed:
      if (status.err != 0) {
        MESHCOMM_THROW(ErrorCode::RemoteError, what, ": peer closed the connection (",
                       std::strerror(status.err), ")");
      }
      MESHCOMM_THROW(ErrorCode::RemoteError, what, ": peer closed the connection");
    case IoResult::Failed:
      detail::throwSystemError(status.err, what);
    case IoResult::Ok:
      break;
  }
  MESHCOMM_THROW(ErrorCode::InternalError, what, ": throwIoError called without an error");
}

namespace {

IoStatus failed(int err) {
  return {IoResult::Failed, err};
}

// ECONNRESET/EPIPE: the peer is gone, which callers report as a closed connection.
IoStatus fromErrno(int err) {
  if (err == ECONNRESET || err == EPIPE) return {IoResult::Closed, err};
  return failed(err);
}

void setNoDelay(int fd) {
  int one = 1;
  // Best effort: the bootstrap works without it, only slower for small messages.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Fd newStreamSocket(int family) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) detail::throwSystemError(errno, "socket()");
  return Fd(fd);
}

// One non-blocking connect attempt, waited on until the deadline. Returns an invalid Fd and *err on failure.
Fd connectOnce(const SockAddr& addr, const Deadline& deadline, int* err) {
  Fd fd = newStreamSocket(addr.family());
  int rc = ::connect(fd.get(), addr.raw(), addr.rawLength());
  // EINTR: the connection continues asynchronously, like EINPROGRESS.
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    *err = errno;
    return Fd();
  }
  if (rc != 0) {
    IoStatus s = waitReady(fd.get(), POLLOUT, deadline);
    if (!s.ok()) {
      *err = s.result == IoResult::TimedOut ? ETIMEDOUT : s.err;
      return Fd();
    }
    int soError = 0;
    socklen_t len = sizeof(soError);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &len) != 0) soError = errno;
    if (soError != 0) {
      *err = soError;
      return Fd();
    }
  }
  setNoDelay(fd.get());
  return fd;
}

bool isRetriedConnectError(int err) {
  return err == ECONNREFUSED || err == ECONNRESET || err == ECONNABORTED || err == EHOSTUNREACH ||
         err == ENETUNREACH || err == ETIMEDOUT || err == EAGAIN;
}

}  // namespace

// ---- listen / connect / accept ---------------------------------------------------------------------------

int tryListen(const SockAddr& addr, Fd* out) {
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  Fd owned(fd);
  int one = 1;
  // SO_REUSEADDR only skips TIME_WAIT leftovers; a port another socket listens on still gives EADDRINUSE.
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) return errno;
  if (::bind(fd, addr.raw(), addr.rawLength()) != 0) return errno;
  if (::listen(fd, SOMAXCONN) != 0) return errno;
  *out = std::move(owned);
  return 0;
}

SockAddr localAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    detail::throwSystemError(errno, "getsockname()");
  return SockAddr::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

Fd connectTo(const SockAddr& addr, const Deadline& deadline, ConnectRetry retry, const std::string& what) {
  auto backoff = std::chrono::milliseconds(10);
  int lastErr = 0;
  while (true) {
    Fd fd = connectOnce(addr, deadline, &lastErr);
    if (fd.valid()) return fd;
    if (deadline.expired()) break;
    if (retry == ConnectRetry::No || !isRetriedConnectError(lastErr)) {
      MESHCOMM_THROW(lastErr == ECONNREFUSED ? ErrorCode::RemoteError : ErrorCode::SystemError, what,
                     ": cannot connect to ", addr.toString(), ": ", std::strerror(lastErr));
    }
    // Back off (10 ms doubling to 200 ms) but never sleep past the deadline.
    auto left = deadline.when() - Deadline::Clock::now();
    std::this_thread::sleep_for(std::min<Deadline::Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  MESHCOMM_THROW(ErrorCode::Timeout, what, ": cannot connect to ", addr.toString(), " within ",
                 formatSeconds(deadline.budgetSeconds()), " (last error: ", std::strerror(lastErr), ")");
}

Fd acceptConnection(int listenFd, SockAddr* remote, int* err) {
  *err = 0;
  while (true) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(listenFd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Fd owned(fd);
      setNoDelay(fd);
      if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
        *remote = SockAddr::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
      }
      return owned;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) *err = errno;
    return Fd();
  }
}

// ---- deadline-bounded transfers --------------------------------------------------------------------------

IoStatus waitReady(int fd, short events, const Deadline& deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.pollTimeoutMs());
    if (rc > 0) return {};  // ready, or an error that the next transfer reports
    if (rc == 0) return {IoResult::TimedOut, 0};
    if (errno != EINTR) return failed(errno);
  }
}

IoStatus sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline) {
  return sendAll(fd, {iovec{const_cast<void*>(data), bytes}}, deadline);
}

IoStatus sendAll(int fd, std::vector<iovec> parts, const Deadline& deadline) {
  size_t first = 0;  // parts[first..] remain, parts[first] possibly advanced
  while (true) {
    while (first < parts.size() && parts[first].iov_len == 0) ++first;
    if (first == parts.size()) return {};
    msghdr msg{};
    msg.msg_iov = parts.data() + first;
    msg.msg_iovlen = parts.size() - first;
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return fromErrno(errno);
      IoStatus s = waitReady(fd, POLLOUT, deadline);
      if (!s.ok()) return s;
      continue;
    }
    for (size_t left = static_cast<size_t>(n); left > 0; ++first) {
      size_t take = std::min(left, parts[first].iov_len);
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + take;
      parts[first].iov_len -= take;
      left -= take;
      if (parts[first].iov_len > 0) break;
    }
  }
}

IoStatus recvAll(int fd, void* data, size_t bytes, const Deadline& deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0) {
      return {IoResult::Closed, 0};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      IoStatus s = waitReady(fd, POLLIN, deadline);
      if (!s.ok()) return s;
    } else if (errno != EINTR) {
      return fromErrno(errno);
    }
  }
  return {};
}

// ---- PolledConn ------------------------------------------------------------------------------------------

void PolledConn::queueOutput(const std::vector<uint8_t>& bytes) {
  if (outPos_ == out_.size()) {
    out_.clear();
    outPos_ = 0;
  }
  out_.insert(out_.end(), bytes.begin(), bytes.end());
}

void PolledConn::expectInput(size_t bytes) {
  in_.clear();
  inFill_ = 0;
  inWant_ = bytes;
  expecting_ = true;
  growInput();
}

void PolledConn::growInput() {
  size_t step = std::max(kInputStep, inFill_);
  in_.resize(inFill_ + std::min(step, inWant_ - inFill_));
}

std::vector<uint8_t> PolledConn::takeInput() {
  std::vector<uint8_t> input = std::move(in_);
  input.resize(inFill_);
  in_.clear();
  inFill_ = 0;
  inWant_ = 0;
  expecting_ = false;
  return input;
}

short PolledConn::pollEvents() const {
  return static_cast<short>(POLLIN | (outputPending() ? POLLOUT : 0));
}

IoStatus PolledConn::pumpOutput() {
  while (outputPending()) {
    ssize_t n = ::send(fd_.get(), out_.data() + outPos_, out_.size() - outPos_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      outPos_ += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return {};
    } else if (errno != EINTR) {
      return fromErrno(errno);
    }
  }
  return {};
}

IoStatus PolledConn::pumpInput() {
  while (true) {
    uint8_t stray;
    bool unexpected = !expecting_ || inFill_ == inWant_;
    if (!unexpected && inFill_ == in_.size()) growInput();
    // With nothing expected, read one byte only to tell EOF (Closed) from a protocol violation.
    void* dst = unexpected ? &stray : in_.data() + inFill_;
    size_t want = unexpected ? 1 : in_.size() - inFill_;
    ssize_t n = ::recv(fd_.get(), dst, want, MSG_DONTWAIT);
    if (n == 0) return {IoResult::Closed, 0};
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      return fromErrno(errno);
    }
    if (unexpected) return failed(EPROTO);
    inFill_ += static_cast<size_t>(n);
    if (inFill_ == inWant_) return {};
  }
}

// ---- interface addresses ---------------------------------------------------------------------------------

namespace {

using IfAddrs = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

IfAddrs listInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) detail::throwSystemError(errno, "getifaddrs()");
  return IfAddrs(list, freeifaddrs);
}

bool isUsable(const ifaddrs* ifa, int family) {
  if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family || !(ifa->ifa_flags & IFF_UP)) return false;
  if (family == AF_INET6) {
    // Link-local IPv6 addresses need a scope id that a UniqueId cannot carry.
    const auto* a6 = &reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr;
    return !IN6_IS_ADDR_LINKLOCAL(a6);
  }
  return true;
}

SockAddr toSockAddr(const ifaddrs* ifa) {
  socklen_t len = ifa->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  SockAddr a = SockAddr::fromSockaddr(ifa->ifa_addr, len);
  a.setPort(0);
  return a;
}

}  // namespace

SockAddr interfaceAddress(const std::string& ifname) {
  IfAddrs list = listInterfaces();
  for (int family : {AF_INET, AF_INET6}) {
    for (const ifaddrs* ifa = list.get(); ifa; ifa = ifa->ifa_next) {
      if (ifname == ifa->ifa_name && isUsable(ifa, family)) return toSockAddr(ifa);
    }
  }
  MESHCOMM_THROW(ErrorCode::InvalidUsage, "MESHCOMM_SOCKET_IFNAME=", ifname,
                 ": no such interface, or it is down or has no IPv4/global IPv6 address");
}

SockAddr advertisedAddress() {
  if (auto ifname = envRaw("MESHCOMM_SOCKET_IFNAME")) return interfaceAddress(*ifname);
  IfAddrs list = listInterfaces();
  for (const ifaddrs* ifa = list.get(); ifa; ifa = ifa->ifa_next) {
    if (isUsable(ifa, AF_INET) && !(ifa->ifa_flags & IFF_LOOPBACK)) return toSockAddr(ifa);
  }
  return SockAddr::loopbackV4(0);
}

// ---- eventfd ---------------------------------------------------------------------------------------------

Fd makeEventFd() {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) detail::throwSystemError(errno, "eventfd()");
  return Fd(fd);
}

void signalEventFd(int fd) {
  uint64_t one = 1;
  // EAGAIN means the counter is saturated, i.e. already signalled; nothing else can fail on a valid eventfd.
  while (::write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

}  // namespace meshcomm::net
