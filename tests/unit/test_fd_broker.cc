// The per-process fd broker: fds published in one process are fetched by forked children (and by the
// process itself) through the abstract unix socket; withdrawn and unknown ids give clear errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/fd_broker.hpp"
#include "meshcomm/errors.hpp"
#include "scoped_env.hpp"

using meshcomm::Error;
using meshcomm::ErrorCode;
using meshcomm::FdBroker;

namespace {

// An unlinked temporary file holding `content`; returns its fd.
int makeTempFile(const std::string& content) {
  char path[] = "/tmp/meshcomm_fdb_test_XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return -1;
  ::unlink(path);
  if (::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return out;
}

size_t openFdCount() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // the DIR's own fd
}

// Runs `fn` in a forked child and returns its exit code (signals: 128 + signal). The child leaves with
// _exit, so no gtest or static state of the parent runs twice.
int inChild(const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int rc = 90;
    try {
      rc = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: unexpected exception: %s\n", e.what());
      rc = 91;
    } catch (...) {
      rc = 92;
    }
    ::_exit(rc);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -2;
}

// Expects fetch(name, id) to throw Error(code) whose text contains every string of `parts`.
void expectFetchError(const std::string& name, uint64_t id, ErrorCode code,
                      const std::vector<std::string>& parts, double timeout = 5.0) {
  try {
    int fd = FdBroker::fetch(name, id, timeout);
    ::close(fd);
    ADD_FAILURE() << "fetch of export id " << id << " from " << name << " succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(FdBroker, NameIsPrivateAndStable) {
  const std::string name = FdBroker::instance().name();
  EXPECT_EQ(name, FdBroker::instance().name());
  EXPECT_LE(name.size(), FdBroker::kMaxNameLength);
  const std::string prefix =
      "meshcomm-fdb-" + std::to_string(::getuid()) + "-" + std::to_string(::getpid()) + "-";
  EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
  EXPECT_EQ(name.size(), prefix.size() + 16) << name;  // 64-bit random part in hex
}

TEST(FdBroker, FetchInSameProcess) {
  int fd = makeTempFile("same process content");
  ASSERT_GE(fd, 0);
  const uint64_t id = FdBroker::instance().publish(fd);
  ::close(fd);  // the broker keeps its own duplicate
  EXPECT_GT(id, 0u);
  int got = FdBroker::fetch(FdBroker::instance().name(), id, 5.0);
  ASSERT_GE(got, 0);
  EXPECT_EQ(readAll(got), "same process content");
  EXPECT_NE(::fcntl(got, F_GETFD) & FD_CLOEXEC, 0) << "received fds must be close-on-exec";
  ::close(got);
  FdBroker::instance().withdraw(id);
}

TEST(FdBroker, ChildFetchesPublishedFd) {
  const std::string content = "hello from the parent, pid " + std::to_string(::getpid());
  int fd = makeTempFile(content);
  ASSERT_GE(fd, 0);
  const uint64_t id = FdBroker::instance().publish(fd);
  ::close(fd);
  const std::string name = FdBroker::instance().name();
  int rc = inChild([&]() {
    int got = FdBroker::fetch(name, id, 5.0);
    std::string read = readAll(got);
    ::close(got);
    return read == content ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
  FdBroker::instance().withdraw(id);
}

TEST(FdBroker, WithdrawnAndUnknownIdsAreClearErrors) {
  int fd = makeTempFile("x");
  ASSERT_GE(fd, 0);
  const uint64_t id = FdBroker::instance().publish(fd);
  ::close(fd);
  FdBroker::instance().withdraw(id);
  FdBroker::instance().withdraw(id);  // twice: ignored
  const std::string name = FdBroker::instance().name();
  const std::string notFound = "export id " + std::to_string(id) + " not found (the owner released it)";
  expectFetchError(name, id, ErrorCode::RemoteError, {name, notFound});
  expectFetchError(name, 0xdeadbeefull, ErrorCode::RemoteError, {name, "export id 3735928559 not found"});
  int rc = inChild([&]() {
    try {
      int got = FdBroker::fetch(name, id, 5.0);
      ::close(got);
      return 1;
    } catch (const Error& e) {
      return e.code() == ErrorCode::RemoteError && std::string(e.what()).find(notFound) != std::string::npos
                 ? 0
                 : 2;
    }
  });
  EXPECT_EQ(rc, 0);
}

TEST(FdBroker, ExportIdsAreNeverReused) {
  int a = makeTempFile("first");
  int b = makeTempFile("second");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  const uint64_t idA = FdBroker::instance().publish(a);
  ::close(a);
  FdBroker::instance().withdraw(idA);
  const uint64_t idB = FdBroker::instance().publish(b);  // likely reuses the fd number, never the id
  ::close(b);
  EXPECT_NE(idA, idB);
  const std::string name = FdBroker::instance().name();
  expectFetchError(name, idA, ErrorCode::RemoteError, {"not found"});
  int got = FdBroker::fetch(name, idB, 5.0);
  EXPECT_EQ(readAll(got), "second");
  ::close(got);
  FdBroker::instance().withdraw(idB);
}

TEST(FdBroker, ManyFetchesLeakNothing) {
  int fd = makeTempFile("many");
  ASSERT_GE(fd, 0);
  const size_t publishedBefore = FdBroker::instance().publishedCount();
  const uint64_t id = FdBroker::instance().publish(fd);
  ::close(fd);
  EXPECT_EQ(FdBroker::instance().publishedCount(), publishedBefore + 1);
  const std::string name = FdBroker::instance().name();
  int rc = inChild([&]() {
    const size_t before = openFdCount();
    for (int i = 0; i < 500; ++i) {
      int got = FdBroker::fetch(name, id, 5.0);
      if (readAll(got) != "many") return 1;
      ::close(got);
    }
    for (int i = 0; i < 50; ++i) {  // failing fetches leak nothing either
      try {
        ::close(FdBroker::fetch(name, id + 1000000, 5.0));
        return 2;
      } catch (const Error&) {
      }
    }
    return openFdCount() == before ? 0 : 3;
  });
  EXPECT_EQ(rc, 0);

  // Concurrent fetches from threads of this process.
  const size_t before = openFdCount();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&]() {
      for (int i = 0; i < 50; ++i) {
        try {
          int got = FdBroker::fetch(name, id, 5.0);
          if (readAll(got) != "many") ++failures;
          ::close(got);
        } catch (...) {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // The broker thread of this process closes its end of each served connection after the client has its
  // fd, so give it time (on a loaded 2-core CI machine running other tests beside this one, 2 s once was not
  // enough); the count must come back exactly.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (openFdCount() != before && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(openFdCount(), before);
  FdBroker::instance().withdraw(id);
  EXPECT_EQ(FdBroker::instance().publishedCount(), publishedBefore);
}

TEST(FdBroker, UnreachableBrokerIsAClearError) {
  const std::string name = "meshcomm-fdb-test-nobody-listens-" + std::to_string(::getpid());
  expectFetchError(name, 7, ErrorCode::RemoteError, {name, "cannot connect", "export id 7"});
  expectFetchError("", 7, ErrorCode::RemoteError, {"invalid broker name"});
  expectFetchError(std::string(200, 'x'), 7, ErrorCode::RemoteError, {"invalid broker name"});
}

namespace {

// A listener on the abstract name `name` that never accepts: connect and send succeed (backlog), the answer
// never comes. Closed with the object.
class SilentBroker {
 public:
  explicit SilentBroker(const std::string& name) : fd_(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    listening_ =
        fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 && ::listen(fd_, 4) == 0;
  }
  ~SilentBroker() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool listening() const { return listening_; }

 private:
  int fd_;
  bool listening_ = false;
};

// Seconds a fetch from a silent broker with `timeout` took to fail with Timeout, its text containing
// `expect`.
double secondsToTimeOut(const std::string& name, double timeout, const std::string& expect) {
  SilentBroker broker(name);
  EXPECT_TRUE(broker.listening()) << name;
  const auto start = std::chrono::steady_clock::now();
  expectFetchError(name, 3, ErrorCode::Timeout, {name, expect}, timeout);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(FdBroker, SilentBrokerTimesOut) {
  const double elapsed =
      secondsToTimeOut("meshcomm-fdb-test-silent-" + std::to_string(::getpid()), 0.3, "no answer within");
  EXPECT_GE(elapsed, 0.25);
  EXPECT_LT(elapsed, 5.0);
}

TEST(FdBroker, TheDefaultTimeoutIsBoundedWhateverTheBootstrapTimeoutSays) {
  for (const char* v : {"0", "-5"}) {
    meshcomm::test::ScopedEnv env("MESHCOMM_BOOTSTRAP_TIMEOUT", v);
    EXPECT_EQ(FdBroker::defaultTimeoutSec(), 120.0) << "MESHCOMM_BOOTSTRAP_TIMEOUT=" << v;
  }
  meshcomm::test::ScopedEnv env("MESHCOMM_BOOTSTRAP_TIMEOUT", "7");
  EXPECT_EQ(FdBroker::defaultTimeoutSec(), 7.0);
}

TEST(FdBroker, ANegativeTimeoutWaitsTheDefaultNotForever) {
  // Timeout -1 takes defaultTimeoutSec() (1 s here), not "no limit".
  meshcomm::test::ScopedEnv env("MESHCOMM_BOOTSTRAP_TIMEOUT", "1");
  const double elapsed = secondsToTimeOut("meshcomm-fdb-test-silent-default-" + std::to_string(::getpid()),
                                          -1, "no answer within 1 s");
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 10.0);
}

TEST(FdBroker, OtherUsersAreDropped) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch to another uid in a child";
  int fd = makeTempFile("secret");
  ASSERT_GE(fd, 0);
  const uint64_t id = FdBroker::instance().publish(fd);
  ::close(fd);
  const std::string name = FdBroker::instance().name();
  int rc = inChild([&]() {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 10;
    // The library client refuses a broker of another user outright.
    try {
      ::close(FdBroker::fetch(name, id, 5.0));
      return 1;
    } catch (const Error& e) {
      if (std::string(e.what()).find("belongs to uid") == std::string::npos) return 2;
    }
    // A hand-made client gets its connection closed without an answer (and without an fd).
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return 3;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (::connect(s, reinterpret_cast<sockaddr*>(&addr), len) != 0) return 4;
    struct {
      uint32_t magic, version;
      uint64_t id;
    } req{0x4d434642u, 1u, id};
    (void)::send(s, &req, sizeof(req), MSG_NOSIGNAL);
    pollfd p{s, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return 5;
    char buf[64];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    iovec iov{buf, sizeof(buf)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(s, &msg, 0);
    const int err = errno;
    ::close(s);
    if (n == 0) return msg.msg_controllen == 0 ? 0 : 6;
    return n < 0 && err == ECONNRESET ? 0 : 7;
  });
  EXPECT_EQ(rc, 0);
  FdBroker::instance().withdraw(id);
}

#if defined(__SANITIZE_THREAD__)
#define MESHCOMM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MESHCOMM_TSAN 1
#endif
#endif

TEST(FdBroker, ForkedChildRunsItsOwnBroker) {
#ifdef MESHCOMM_TSAN
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
#endif
  int fd = makeTempFile("parent's");
  ASSERT_GE(fd, 0);
  const uint64_t parentId = FdBroker::instance().publish(fd);
  ::close(fd);
  const std::string parentName = FdBroker::instance().name();
  int rc = inChild([&]() {
    // The inherited broker state belongs to the parent: the child starts a fresh broker of its own.
    const std::string childName = FdBroker::instance().name();
    if (childName == parentName) return 1;
    if (FdBroker::instance().publishedCount() != 0) return 2;
    int own = makeTempFile("child's");
    const uint64_t id = FdBroker::instance().publish(own);
    ::close(own);
    int got = FdBroker::fetch(childName, id, 5.0);
    const bool ok = readAll(got) == "child's";
    ::close(got);
    FdBroker::instance().withdraw(id);
    FdBroker::instance().shutdown();  // joins the child's own server thread
    return ok ? 0 : 3;
  });
  EXPECT_EQ(rc, 0);
  // The parent's broker still serves (the child did not stop it).
  int got = FdBroker::fetch(parentName, parentId, 5.0);
  EXPECT_EQ(readAll(got), "parent's");
  ::close(got);
  FdBroker::instance().withdraw(parentId);
}
