// Small socket helpers for the bootstrap: owned descriptors, IPv4/IPv6 addresses, listening, connecting
// with retry, deadline-bounded I/O on non-blocking TCP sockets, and a buffered connection for poll loops.
// Every socket is created non-blocking and close-on-exec; sends never raise SIGPIPE (MSG_NOSIGNAL).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace meshcomm::net {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// The point in time after which a blocking operation gives up, with the budget it was created from (for
// error messages).
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline after(double seconds);
  bool expired() const { return Clock::now() >= when_; }
  // Milliseconds left, rounded up, for poll(); 0 once expired.
  int pollTimeoutMs() const;
  Clock::time_point when() const { return when_; }
  double budgetSeconds() const { return budget_; }

 private:
  Clock::time_point when_{};
  double budget_ = 0;
};

// "3s", "0.5s": a duration as error messages print it.
std::string formatSeconds(double seconds);

// An IPv4 or IPv6 socket address (AF_UNSPEC when default-constructed).
class SockAddr {
 public:
  SockAddr() = default;
  static SockAddr fromSockaddr(const sockaddr* sa, socklen_t len);
  // family AF_INET (first 4 bytes of `address` used) or AF_INET6; throws InvalidUsage otherwise.
  static SockAddr fromBytes(int family, const std::array<uint8_t, 16>& address, uint16_t port);
  // A numeric address or a host name (resolved; IPv4 preferred). Throws InvalidUsage when it cannot resolve.
  static SockAddr resolve(const std::string& host, uint16_t port);
  // "host:port" or "[ipv6]:port", port 1-65535. Throws InvalidUsage naming the text when malformed.
  static SockAddr parse(const std::string& hostPort);
  static SockAddr loopbackV4(uint16_t port);

  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isLoopback() const;
  // The raw address, IPv4 in the first 4 bytes and the rest zero.
  std::array<uint8_t, 16> addressBytes() const;
  const sockaddr* raw() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t rawLength() const { return length_; }
  std::string host() const;      // numeric: "10.0.0.1", "fd00::2"
  std::string toString() const;  // "10.0.0.1:29500", "[fd00::2]:29500"

 private:
  sockaddr_storage storage_{};
  socklen_t length_ = 0;
};

// The outcome of deadline-bounded or non-blocking I/O. `err` is the errno of Failed (and of Closed when the
// peer reset the connection).
enum class IoResult { Ok, Closed, TimedOut, Failed };
struct IoStatus {
  IoResult result = IoResult::Ok;
  int err = 0;
  bool ok() const { return result == IoResult::Ok; }
};

// Throws the Error that describes a failed `status`: Timeout ("<what> timed out after Xs"), RemoteError
// ("<what>: peer closed the connection") or SystemError ("<what>: <strerror>").
[[noreturn]] void throwIoError(const IoStatus& status, const std::string& what, const Deadline& deadline);

// Binds `addr` (port 0 picks an ephemeral port) and listens. Returns 0, or the errno of the failing call.
int tryListen(const SockAddr& addr, Fd* out);
// The address a socket is bound to (getsockname).
SockAddr localAddress(int fd);

// Whether connectTo retries refused/unreachable attempts until the deadline (a root that starts later).
enum class ConnectRetry { No, UntilDeadline };
// Connects to `addr` before `deadline`. Throws Timeout, or SystemError/RemoteError for errors that are
// not retried; messages start with `what`.
Fd connectTo(const SockAddr& addr, const Deadline& deadline, ConnectRetry retry, const std::string& what);

// Accepts one pending connection (non-blocking, close-on-exec). Returns an invalid Fd when none is pending
// (*err = 0) or the accept failed (*err = errno).
Fd acceptConnection(int listenFd, SockAddr* remote, int* err);

// Blocking-with-deadline transfers of exactly the given bytes (poll() between partial transfers).
IoStatus sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline);
IoStatus sendAll(int fd, std::vector<iovec> parts, const Deadline& deadline);
IoStatus recvAll(int fd, void* data, size_t bytes, const Deadline& deadline);

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT) or the deadline passes; EINTR is retried.
IoStatus waitReady(int fd, short events, const Deadline& deadline);

// A non-blocking connection served by a poll loop: output is queued and flushed as the socket accepts it;
// input is gathered until an expected number of bytes has arrived. The input buffer grows as bytes arrive
// (at most doubling what has arrived, in steps of at least kInputStep), so an expected length that the peer
// never sends costs no memory.
class PolledConn {
 public:
  static constexpr size_t kInputStep = 64 * 1024;

  PolledConn(Fd fd, SockAddr remote) : fd_(std::move(fd)), remote_(remote) {}
  int fd() const { return fd_.get(); }
  const SockAddr& remote() const { return remote_; }

  void queueOutput(const std::vector<uint8_t>& bytes);
  bool outputPending() const { return outPos_ < out_.size(); }
  // Starts gathering exactly `bytes` bytes of input.
  void expectInput(size_t bytes);
  bool inputComplete() const { return expecting_ && inFill_ == inWant_; }
  // Bytes the input buffer holds room for now (grows with the input that arrived).
  size_t inputCapacity() const { return in_.size(); }
  // The gathered input; afterwards no input is expected until the next expectInput().
  std::vector<uint8_t> takeInput();
  // Input is always polled so that EOF is seen; output only while some is pending.
  short pollEvents() const;

  // Moves what the socket allows without blocking. Returns Closed on EOF, Failed on errors, and Failed
  // with EPROTO when bytes arrive while no input is expected.
  IoStatus pumpOutput();
  IoStatus pumpInput();

 private:
  // Makes room for the next bytes of the expected input.
  void growInput();

  Fd fd_;
  SockAddr remote_;
  std::vector<uint8_t> out_;
  size_t outPos_ = 0;
  std::vector<uint8_t> in_;
  size_t inFill_ = 0;
  size_t inWant_ = 0;
  bool expecting_ = false;
};

// The address of interface `ifname`: its first IPv4 address, else its first global IPv6 address. Throws
// InvalidUsage when it has neither.
SockAddr interfaceAddress(const std::string& ifname);
// The address this host advertises in a UniqueId (port 0): MESHCOMM_SOCKET_IFNAME's address if set, else the
// first non-loopback IPv4 address of an interface that is up, else 127.0.0.1.
SockAddr advertisedAddress();

// An eventfd (non-blocking, close-on-exec) that wakes a poll loop from another thread, and its trigger.
Fd makeEventFd();
void signalEventFd(int fd);

}  // namespace meshcomm::net
