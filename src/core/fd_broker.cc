#include "core/fd_broker.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/logging.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

constexpr uint32_t kMagic = 0x4d434642;  // "MCFB"
constexpr uint32_t kVersion = 1;

struct Request {
  uint32_t magic;
  uint32_t version;
  uint64_t exportId;
};
static_assert(sizeof(Request) == 16, "Request layout");

enum : int32_t { kStatusOk = 0, kStatusNotFound = 1, kStatusBadRequest = 2 };

struct Reply {
  uint32_t magic;
  int32_t status;
  uint64_t exportId;
};
static_assert(sizeof(Reply) == 16, "Reply layout");

// A client connection that has not sent its request within this time is dropped.
constexpr auto kClientDeadline = std::chrono::seconds(10);
// At most this many half-open client connections are kept; more are refused.
constexpr size_t kMaxClients = 1024;

using Clock = std::chrono::steady_clock;

void closeFd(int fd) noexcept {
  if (fd >= 0) ::close(fd);  // never retried on EINTR (Linux closes the fd regardless)
}

// sockaddr for an abstract unix name: sun_path = '\0' + name (no terminator).
socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

bool peerUid(int fd, uid_t* uid, pid_t* pid) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) return false;
  *uid = cred.uid;
  *pid = cred.pid;
  return true;
}

uint64_t randomU64() {
  std::random_device rd;  // getrandom()/urandom on Linux
  uint64_t hi = rd(), lo = rd();
  return (hi << 32) ^ lo;
}

void logNoThrow(LogLevel level, const std::string& text) noexcept {
  try {
    if (logEnabled(level)) logLine(level, text);
  } catch (...) {
  }
}

}  // namespace

class FdBroker::Impl {
 public:
  mutable std::mutex mu;
  bool started = false;
  bool stopped = false;
  pid_t ownerPid = -1;
  std::string name;
  int listenFd = -1;
  int wakeRead = -1, wakeWrite = -1;
  std::thread thread;
  uint64_t nextExportId = 1;
  std::unordered_map<uint64_t, int> fds;  // export id -> our duplicate

  // Requires mu. Starts the server once (again in a forked child, whose copy has no thread).
  void ensureStartedLocked() {
    if (stopped)
      MESHCOMM_THROW(ErrorCode::InternalError, "fd broker: used after shutdown (the process is exiting)");
    if (started && ownerPid == ::getpid()) return;
    if (started) forgetInheritedLocked();

    const uid_t uid = ::getuid();
    const pid_t pid = ::getpid();
    char buf[96];
    std::snprintf(buf, sizeof(buf), "meshcomm-fdb-%u-%d-%016llx", static_cast<unsigned>(uid),
                  static_cast<int>(pid), static_cast<unsigned long long>(randomU64()));
    std::string newName = buf;
    if (newName.size() > kMaxNameLength) MESHCOMM_THROW(ErrorCode::InternalError, "fd broker name too long");

    int lfd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) detail::throwSystemError(errno, "fd broker: socket(AF_UNIX, SOCK_SEQPACKET)");
    sockaddr_un addr{};
    socklen_t len = abstractAddress(newName, &addr);
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      int e = errno;
      closeFd(lfd);
      detail::throwSystemError(e, "fd broker: bind(@" + newName + ")");
    }
    if (::listen(lfd, 128) != 0) {
      int e = errno;
      closeFd(lfd);
      detail::throwSystemError(e, "fd broker: listen(@" + newName + ")");
    }
    int pipeFds[2];
    if (::pipe2(pipeFds, O_CLOEXEC | O_NONBLOCK) != 0) {
      int e = errno;
      closeFd(lfd);
      detail::throwSystemError(e, "fd broker: pipe2");
    }
    listenFd = lfd;
    wakeRead = pipeFds[0];
    wakeWrite = pipeFds[1];
    name = newName;
    ownerPid = pid;
    try {
      thread = std::thread([this] { serve(); });
    } catch (...) {
      closeFd(listenFd);
      closeFd(wakeRead);
      closeFd(wakeWrite);
      listenFd = wakeRead = wakeWrite = -1;
      throw;
    }
    started = true;
    logNoThrow(LogLevel::DEBUG, "fd broker @" + name + " started");
  }

  // In a forked child: the parent's server thread does not exist here and the inherited descriptors are
  // copies. Close our copies (the parent's stay open) and forget the parent's state without touching the
  // parent's thread (the std::thread object is released, not joined).
  void forgetInheritedLocked() noexcept {
    closeFd(listenFd);
    closeFd(wakeRead);
    closeFd(wakeWrite);
    listenFd = wakeRead = wakeWrite = -1;
    for (auto& kv : fds) closeFd(kv.second);
    fds.clear();
    // A std::thread copied by fork() refers to no thread of this process; leak the handle.
    new (&thread) std::thread();
    started = false;
  }

  void serve() noexcept {
    struct Client {
      int fd;
      Clock::time_point deadline;
    };
    std::vector<Client> clients;
    std::vector<pollfd> pfds;
    try {
      for (;;) {
        pfds.clear();
        pfds.push_back({wakeRead, POLLIN, 0});
        pfds.push_back({listenFd, POLLIN, 0});
        for (const auto& c : clients) pfds.push_back({c.fd, POLLIN, 0});
        int timeoutMs = clients.empty() ? -1 : 1000;
        int n = ::poll(pfds.data(), pfds.size(), timeoutMs);
        if (n < 0) {
          if (errno == EINTR) continue;
          logNoThrow(LogLevel::ERROR, detail::concat("fd broker @", name, ": poll failed: ",
                                                     std::strerror(errno), "; the broker stops"));
          break;
        }
        if (pfds[0].revents != 0) break;  // shutdown

        // Requests of known clients (before accepting, so that pfds indices stay valid).
        std::vector<Client> keep;
        const auto now = Clock::now();
        for (size_t i = 0; i < clients.size(); ++i) {
          const short re = pfds[2 + i].revents;
          const Client& c = clients[i];
          if (re & POLLIN) {
            answer(c.fd);
            closeFd(c.fd);
          } else if (re & (POLLHUP | POLLERR | POLLNVAL)) {
            closeFd(c.fd);
          } else if (now >= c.deadline) {
            logNoThrow(LogLevel::DEBUG, "fd broker @" + name + ": dropping a client that sent no request");
            closeFd(c.fd);
          } else {
            keep.push_back(c);
          }
        }
        clients.swap(keep);

        if (pfds[1].revents & POLLIN) {
          for (;;) {
            int cfd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (cfd < 0) {
              if (errno == EINTR) continue;
              if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) {
                logNoThrow(LogLevel::WARN,
                           detail::concat("fd broker @", name, ": accept failed: ", std::strerror(errno)));
                // EMFILE and the like: back off briefly instead of spinning on a readable listener.
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
              }
              break;
            }
            uid_t uid = 0;
            pid_t pid = 0;
            if (!peerUid(cfd, &uid, &pid) || uid != ::getuid()) {
              logNoThrow(LogLevel::WARN,
                         detail::concat("fd broker @", name, ": dropped a connection from uid ", uid, " pid ",
                                        pid, " (not this user)"));
              closeFd(cfd);
              continue;
            }
            if (clients.size() >= kMaxClients) {
              logNoThrow(LogLevel::WARN, "fd broker @" + name + ": too many pending clients; refusing one");
              closeFd(cfd);
              continue;
            }
            clients.push_back({cfd, Clock::now() + kClientDeadline});
          }
        }
      }
    } catch (const std::exception& e) {
      logNoThrow(LogLevel::ERROR, std::string("fd broker: server thread stopped: ") + e.what());
    } catch (...) {
      logNoThrow(LogLevel::ERROR, "fd broker: server thread stopped on an unknown exception");
    }
    for (const auto& c : clients) closeFd(c.fd);
  }

  // Reads one request from `cfd` and sends the reply (with the fd when found). Never blocks.
  void answer(int cfd) noexcept {
    Request req{};
    ssize_t got;
    do {
      got = ::recv(cfd, &req, sizeof(req), MSG_DONTWAIT | MSG_TRUNC);
    } while (got < 0 && errno == EINTR);
    Reply rep{kMagic, kStatusBadRequest, 0};
    if (got != static_cast<ssize_t>(sizeof(req)) || req.magic != kMagic || req.version != kVersion) {
      if (got > 0) {
        logNoThrow(LogLevel::WARN,
                   detail::concat("fd broker @", name, ": malformed request (", got, " bytes)"));
        sendReply(cfd, rep, -1);
      }
      return;
    }
    rep.exportId = req.exportId;
    std::lock_guard<std::mutex> lock(mu);  // the fd stays open while it is being sent
    auto it = fds.find(req.exportId);
    if (it == fds.end()) {
      rep.status = kStatusNotFound;
      sendReply(cfd, rep, -1);
    } else {
      rep.status = kStatusOk;
      sendReply(cfd, rep, it->second);
    }
  }

  void sendReply(int cfd, const Reply& rep, int fdToSend) noexcept {
    msghdr msg{};
    iovec iov{const_cast<Reply*>(&rep), sizeof(rep)};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (fdToSend >= 0) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &fdToSend, sizeof(int));
    }
    ssize_t r;
    do {
      r = ::sendmsg(cfd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      logNoThrow(LogLevel::DEBUG, detail::concat("fd broker @", name, ": reply for export id ", rep.exportId,
                                                 " not sent: ", std::strerror(errno)));
    }
  }
};

FdBroker::FdBroker() : impl_(new Impl) {}

FdBroker& FdBroker::instance() {
  // Never destroyed: export registrations may be withdrawn from static destructors that run after ours.
  // The server thread is stopped and joined by `stopper` at exit.
  static FdBroker* broker = new FdBroker();
  struct Stopper {
    ~Stopper() { broker->shutdown(); }
  };
  static Stopper stopper;
  return *broker;
}

std::string FdBroker::name() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ensureStartedLocked();
  return impl_->name;
}

uint64_t FdBroker::publish(int fd) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ensureStartedLocked();
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0)
    detail::throwSystemError(errno, detail::concat("fd broker: duplicating fd ", fd, " to publish it"));
  const uint64_t id = impl_->nextExportId++;
  try {
    impl_->fds.emplace(id, dup);
  } catch (...) {
    closeFd(dup);
    throw;
  }
  return id;
}

void FdBroker::withdraw(uint64_t exportId) noexcept {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->started && impl_->ownerPid != ::getpid()) return;  // forked child: the ids are the parent's
    auto it = impl_->fds.find(exportId);
    if (it == impl_->fds.end()) return;
    fd = it->second;
    impl_->fds.erase(it);
  }
  closeFd(fd);
}

size_t FdBroker::publishedCount() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->fds.size();
}

void FdBroker::shutdown() noexcept {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    if (impl_->started && impl_->ownerPid != ::getpid()) {
      // Forked child: the wake pipe is shared with the parent; writing it would stop the parent's broker.
      impl_->forgetInheritedLocked();
      impl_->stopped = true;
      return;
    }
    impl_->stopped = true;
    if (!impl_->started) return;
    char b = 1;
    ssize_t r;
    do {
      r = ::write(impl_->wakeWrite, &b, 1);
    } while (r < 0 && errno == EINTR);
    thread = std::move(impl_->thread);
  }
  if (thread.joinable()) {
    try {
      thread.join();
    } catch (...) {
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  closeFd(impl_->listenFd);
  closeFd(impl_->wakeRead);
  closeFd(impl_->wakeWrite);
  impl_->listenFd = impl_->wakeRead = impl_->wakeWrite = -1;
  for (auto& kv : impl_->fds) closeFd(kv.second);
  impl_->fds.clear();
  impl_->started = false;
}

// ---- client ------------------------------------------------------------------------------------------

namespace {

class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() { closeFd(fd_); }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Milliseconds left before `deadline` for poll().
int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000000000 ? 1000000000 : static_cast<int>(left) + 1;
}

}  // namespace

double FdBroker::defaultTimeoutSec() {
  constexpr double kDefaultSec = 120;
  const int64_t s = envInt("MESHCOMM_BOOTSTRAP_TIMEOUT");
  return s <= 0 ? kDefaultSec : static_cast<double>(s);
}

int FdBroker::fetch(const std::string& brokerName, uint64_t exportId, double timeoutSec) {
  if (timeoutSec < 0) timeoutSec = defaultTimeoutSec();
  const std::string who = detail::concat("fd broker @", brokerName, " (export id ", exportId, ")");
  if (brokerName.empty() || brokerName.size() > kMaxNameLength ||
      brokerName.find('\0') != std::string::npos) {
    MESHCOMM_THROW(ErrorCode::RemoteError, "fd broker: invalid broker name '", brokerName, "' for export id ",
                   exportId);
  }
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeoutSec));
  auto timedOut = [&]() { MESHCOMM_THROW(ErrorCode::Timeout, who, ": no answer within ", timeoutSec, " s"); };

  ScopedFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (sock.get() < 0) detail::throwSystemError(errno, who + ": socket(AF_UNIX, SOCK_SEQPACKET)");
  sockaddr_un addr{};
  socklen_t len = abstractAddress(brokerName, &addr);
  for (;;) {
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
    const int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN) {  // the listener's backlog is full: retry until the deadline
      if (Clock::now() >= deadline) timedOut();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    MESHCOMM_THROW(ErrorCode::RemoteError, who, ": cannot connect: ", std::strerror(e), " (errno ", e,
                   "); the owner process has exited, or it runs in another network namespace (container) — "
                   "use cudaMalloc memory or MESHCOMM_TRANSPORT=tcp there");
  }
  uid_t uid = 0;
  pid_t pid = 0;
  if (!peerUid(sock.get(), &uid, &pid)) detail::throwSystemError(errno, who + ": getsockopt(SO_PEERCRED)");
  if (uid != ::getuid()) {
    MESHCOMM_THROW(ErrorCode::RemoteError, who, ": the broker belongs to uid ", uid, " (pid ", pid,
                   "), not to uid ", ::getuid(), "; refusing to use it");
  }

  Request req{kMagic, kVersion, exportId};
  for (;;) {
    ssize_t r = ::send(sock.get(), &req, sizeof(req), MSG_NOSIGNAL);
    if (r == static_cast<ssize_t>(sizeof(req))) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{sock.get(), POLLOUT, 0};
      int n = ::poll(&p, 1, msLeft(deadline));
      if (n == 0) timedOut();
      continue;
    }
    if (r < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      MESHCOMM_THROW(ErrorCode::RemoteError, who, ": the broker closed the connection before the request");
    }
    detail::throwSystemError(r < 0 ? errno : EIO, who + ": sending the request");
  }

  Reply rep{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  msghdr msg{};
  iovec iov{&rep, sizeof(rep)};
  ssize_t got = -1;
  for (;;) {
    pollfd p{sock.get(), POLLIN, 0};
    int n = ::poll(&p, 1, msLeft(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      detail::throwSystemError(errno, who + ": poll");
    }
    if (n == 0) timedOut();
    std::memset(control, 0, sizeof(control));
    msg = msghdr{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    got = ::recvmsg(sock.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    break;
  }
  if (got < 0) {
    if (errno == ECONNRESET) {
      MESHCOMM_THROW(ErrorCode::RemoteError, who, ": the broker closed the connection without answering");
    }
    detail::throwSystemError(errno, who + ": receiving the reply");
  }

  // Collect every received fd first, so that none leaks whatever the reply says.
  std::vector<int> received;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len >= CMSG_LEN(0)) {
      size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        received.push_back(f);
      }
    }
  }
  auto closeReceived = [&]() {
    for (int f : received) closeFd(f);
  };
  if (got == 0) {
    closeReceived();
    MESHCOMM_THROW(
        ErrorCode::RemoteError, who,
        ": the broker closed the connection without answering (it refuses other users, or is exiting)");
  }
  if (got != static_cast<ssize_t>(sizeof(rep)) || rep.magic != kMagic ||
      (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    closeReceived();
    MESHCOMM_THROW(ErrorCode::RemoteError, who, ": malformed reply (", got, " bytes, flags ", msg.msg_flags,
                   ")");
  }
  if (rep.status == kStatusNotFound) {
    closeReceived();
    MESHCOMM_THROW(ErrorCode::RemoteError, who, ": export id ", exportId,
                   " not found (the owner released it)");
  }
  if (rep.status != kStatusOk || rep.exportId != exportId || received.size() != 1) {
    closeReceived();
    MESHCOMM_THROW(ErrorCode::RemoteError, who, ": bad reply (status ", rep.status, ", export id ",
                   rep.exportId, ", ", received.size(), " fds)");
  }
  return received[0];
}

}  // namespace meshcomm
