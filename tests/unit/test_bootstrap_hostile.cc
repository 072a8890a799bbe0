// The bootstrap against hostile peers: lengths and sizes that a peer controls allocate nothing up front, the
// queues a peer can fill are bounded, a receiver thread that fails turns into errors, and idle connections
// cannot keep honest ranks from their rendezvous. Ranks are forked as in test_bootstrap.cc.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <cstdlib>
#include <string>
#include <vector>

#include "bootstrap/limits.hpp"
#include "bootstrap/peer_receiver.hpp"
#include "bootstrap/root.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id.hpp"
#include "bootstrap/wire.hpp"
#include "forked_ranks.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"
#include "root_client.hpp"

namespace meshcomm {
namespace {

using namespace test;

// ---- helpers ---------------------------------------------------------------------------------------------

std::pair<net::Fd, net::Fd> socketPair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  return {net::Fd(sv[0]), net::Fd(sv[1])};
}

// A listening socket on an ephemeral loopback port.
net::Fd loopbackListener() {
  net::Fd fd;
  RANK_CHECK(net::tryListen(net::SockAddr::loopbackV4(0), &fd) == 0);
  return fd;
}

// TCP connections that never send a byte, and which of them the other end has closed.
class IdleConnections {
 public:
  // Opens `count` connections to `addr` and waits until each is established.
  IdleConnections(const net::SockAddr& addr, int count, const net::Deadline& deadline);
  // Waits until at most `target` are open or the deadline passes; returns how many are open.
  int waitUntilOpenAtMost(int target, const net::Deadline& deadline);

 private:
  void collectClosed(const std::vector<pollfd>& fds);

  std::vector<net::Fd> conns_;
  std::vector<bool> closed_;
  int open_ = 0;
};

IdleConnections::IdleConnections(const net::SockAddr& addr, int count, const net::Deadline& deadline)
    : closed_(static_cast<size_t>(count), false), open_(count) {
  for (int i = 0; i < count; ++i) {
    net::Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    RANK_CHECK(fd.valid(), "socket: ", std::strerror(errno));
    int rc = ::connect(fd.get(), addr.raw(), addr.rawLength());
    RANK_CHECK(rc == 0 || errno == EINPROGRESS, "connect ", i, ": ", std::strerror(errno));
    conns_.push_back(std::move(fd));
  }
  for (size_t i = 0; i < conns_.size(); ++i) {
    RANK_CHECK(net::waitReady(conns_[i].get(), POLLOUT, deadline).ok(), "connection ", i, " not established");
    int err = 0;
    socklen_t len = sizeof(err);
    RANK_CHECK(getsockopt(conns_[i].get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0, "connection ",
               i, ": ", std::strerror(err));
  }
}

int IdleConnections::waitUntilOpenAtMost(int target, const net::Deadline& deadline) {
  while (open_ > target && !deadline.expired()) {
    std::vector<pollfd> fds;
    for (size_t i = 0; i < conns_.size(); ++i) fds.push_back({closed_[i] ? -1 : conns_[i].get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), deadline.pollTimeoutMs()) > 0) collectClosed(fds);
  }
  return open_;
}

void IdleConnections::collectClosed(const std::vector<pollfd>& fds) {
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (!fds[i].revents) continue;
    char buf[64];  // the challenge, then the end of the stream
    ssize_t n = ::recv(conns_[i].get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      closed_[i] = true;
      --open_;
    }
  }
}

// Runs `body` with stderr (where the log goes) redirected to a file, and returns what was written there.
std::string capturingStderr(const std::function<void()>& body) {
  std::FILE* file = std::tmpfile();
  RANK_CHECK(file != nullptr);
  std::fflush(stderr);
  int saved = dup(STDERR_FILENO);
  RANK_CHECK(saved >= 0 && dup2(fileno(file), STDERR_FILENO) >= 0);
  body();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  std::rewind(file);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), file)) > 0;) text.append(buf, n);
  std::fclose(file);
  return text;
}

int countLines(const std::string& text, const std::string& part) {
  int count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

// Sets an environment variable for the lifetime of the guard.
class EnvSetting {
 public:
  EnvSetting(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    setenv(name, value, 1);
  }
  ~EnvSetting() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// ---- no peer-controlled allocation -----------------------------------------------------------------------

TEST(BootstrapHostile, PolledConnAllocatesInputOnlyAsItArrives) {
  auto [reader, writer] = socketPair();
  net::PolledConn conn(std::move(reader), net::SockAddr());
  conn.expectInput(uint64_t{1} << 44);  // a length that a peer announced but will never send
  std::vector<uint8_t> some(1000, 7);
  ASSERT_TRUE(net::sendAll(writer.get(), some.data(), some.size(), net::Deadline::after(5)).ok());
  ASSERT_TRUE(conn.pumpInput().ok());
  EXPECT_FALSE(conn.inputComplete());
  EXPECT_LE(conn.inputCapacity(), net::PolledConn::kInputStep);

  // A message of several steps arrives whole; the buffer never holds more than twice what arrived plus a
  // step.
  const size_t total = 5 * net::PolledConn::kInputStep + 123;
  std::vector<uint8_t> message(total);
  for (size_t i = 0; i < total; ++i) message[i] = static_cast<uint8_t>(i * 31);
  conn.expectInput(total);
  size_t sent = 0;
  while (!conn.inputComplete()) {
    size_t piece = std::min<size_t>(20000, total - sent);
    if (piece > 0) {
      ASSERT_TRUE(net::sendAll(writer.get(), message.data() + sent, piece, net::Deadline::after(5)).ok());
      sent += piece;
    }
    ASSERT_TRUE(conn.pumpInput().ok());
    EXPECT_LE(conn.inputCapacity(), 2 * sent + net::PolledConn::kInputStep);
  }
  EXPECT_EQ(conn.takeInput(), message);
}

TEST(BootstrapHostile, MaxMessageMustBeAPositiveInteger) {
  expectAllSucceeded(runRanks(1, loopbackId(), [](int, const UniqueId& id) {
    for (const char* bad : {"-1", "0"}) {
      EnvSetting limit("MESHCOMM_BOOTSTRAP_MAX_MESSAGE", bad);
      Error e = expectError([&] { TcpBootstrap boot(0, 1, id, 1); }, bad);
      RANK_CHECK(e.code() == ErrorCode::InvalidUsage, e.what());
      RANK_CHECK(contains(e.what(), std::string("rank 0: TcpBootstrap: MESHCOMM_BOOTSTRAP_MAX_MESSAGE=") +
                                        bad + " must be a positive number of bytes"),
                 e.what());
    }
    EnvSetting limit("MESHCOMM_BOOTSTRAP_MAX_MESSAGE", "1GiB");
    Error e = expectError([&] { TcpBootstrap boot(0, 1, id, 1); }, "1GiB");
    RANK_CHECK(e.code() == ErrorCode::InvalidUsage, e.what());
    RANK_CHECK(contains(e.what(), "MESHCOMM_BOOTSTRAP_MAX_MESSAGE='1GiB' is not an integer"), e.what());
  }));
}

TEST(BootstrapHostile, NRanksOutOfBoundsIsRejectedBeforeAnythingIsSizedByIt) {
  const bootstrap::Secret secret = testSecret(6);
  net::Fd listener = loopbackListener();
  const net::SockAddr rootAddr = net::localAddress(listener.get());
  // nRanks 0: the first valid hello sizes the job.
  pid_t root =
      forkProcess([&] { bootstrap::RendezvousRoot(std::move(listener), 0, secret, 10).run(-1); }, "root");
  listener.reset();

  net::Deadline deadline = net::Deadline::after(10);
  for (int nRanks : {INT_MAX, bootstrap::kMaxRanks + 1, 0, -5}) {
    uint32_t kind = 0;
    std::vector<uint8_t> text =
        readRootReply(joinRoot(rootAddr, secret, 0, nRanks, deadline), &kind, deadline);
    EXPECT_EQ(kind, bootstrap::kReplyError) << nRanks;
    EXPECT_TRUE(
        contains(std::string(text.begin(), text.end()),
                 "rank 0 was started with nRanks=" + std::to_string(nRanks) + " (must be in 1..65536)"))
        << std::string(text.begin(), text.end());
  }
  // The root survived and still completes a job.
  net::Fd first = joinRoot(rootAddr, secret, 0, 2, deadline);
  net::Fd second = joinRoot(rootAddr, secret, 1, 2, deadline);
  for (const net::Fd* fd : {&first, &second}) {
    uint32_t kind = 0;
    readRootReply(*fd, &kind, deadline);
    EXPECT_EQ(kind, bootstrap::kReplyTable);
  }
  expectAllSucceeded(waitAll({root}, 10));

  // The constructor bounds nRanks as well, before it starts anything.
  try {
    TcpBootstrap boot(0, INT_MAX, loopbackId(), 1);
    ADD_FAILURE() << "nRanks=INT_MAX was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_TRUE(contains(e.what(), "nRanks=2147483647 (nRanks must be in 1..65536)")) << e.what();
  }
}

// Rank 1 sends more bytes than rank 0 queues for it, rank 2 more messages; rank 0 receives none of them
// until each connection was cut, then still gets what was queued.
TEST(BootstrapHostile, UnreceivedMessagesPerPeerAreBounded) {
  const int n = 3;
  expectAllSucceeded(runRanks(n, loopbackId(), [](int rank, const UniqueId& id) {
    // Rank 0 queues at most 2 * 1000 bytes per peer.
    EnvSetting limit("MESHCOMM_BOOTSTRAP_MAX_MESSAGE", rank == 0 ? "1000" : "100000");
    TcpBootstrap boot(rank, n, id, 10);
    std::vector<uint8_t> payload(1000, static_cast<uint8_t>(rank));
    char done = 0;
    if (rank == 1) {
      for (int i = 0; i < 3; ++i) boot.send(payload.data(), payload.size(), 0, 7);
      boot.recv(&done, 1, 0, 9);
      return;
    }
    if (rank == 2) {
      for (size_t i = 0; i <= bootstrap::kMaxQueuedMessages; ++i) boot.send(nullptr, 0, 0, 7);
      boot.recv(&done, 1, 0, 9);
      return;
    }
    for (int peer : {1, 2}) {
      Error e = expectError([&] { boot.recv(&done, 1, peer, 8); }, "recv from a flooding peer");
      RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
      RANK_CHECK(
          contains(e.what(), detail::concat("rank 0: bootstrap recv(peer ", peer, ", tag 8): peer sent")),
          e.what());
      RANK_CHECK(
          contains(e.what(), "not received yet; at most 65536 messages and 2000 bytes may wait per peer"),
          e.what());
    }
    for (int i = 0; i < 2; ++i) boot.recv(payload.data(), payload.size(), 1, 7);
    RANK_CHECK(payload == std::vector<uint8_t>(1000, 1));
    for (size_t i = 0; i < bootstrap::kMaxQueuedMessages; ++i) boot.recv(nullptr, 0, 2, 7);
    for (int peer : {1, 2}) boot.send(&done, 1, peer, 9);
  }));
}

// poll() fails with EINVAL once it is given more descriptors than RLIMIT_NOFILE allows: rank 0 lowers the
// limit under its receiver thread, which then stops at its next poll().
TEST(BootstrapHostile, AFailedReceiverThreadFailsEveryLaterCall) {
  int release[2];
  ASSERT_EQ(pipe(release), 0);
  expectAllSucceeded(runRanks(2, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, 2, id, 5);
    boot.barrier();  // both data connections exist now
    char byte = 1;
    if (rank == 1) {
      boot.recv(&byte, 1, 0, 1);
      boot.send(&byte, 1, 0, 1);  // wakes rank 0's receiver
      RANK_CHECK(read(release[0], &byte, 1) == 1);
      return;
    }
    rlimit limit{};
    RANK_CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0);
    limit.rlim_cur = 2;
    RANK_CHECK(setrlimit(RLIMIT_NOFILE, &limit) == 0);
    boot.send(&byte, 1, 1, 1);
    auto start = Clock::now();
    Error e = expectError([&] { boot.recv(&byte, 1, 1, 2); }, "recv after the receiver failed");
    RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
    RANK_CHECK(contains(e.what(),
                        "rank 0: bootstrap recv(peer 1, tag 2): this rank's bootstrap receiver "
                        "thread failed"),
               e.what());
    RANK_CHECK(contains(e.what(), "poll(): Invalid argument"), e.what());
    RANK_CHECK(secondsSince(start) < 2, "took ", secondsSince(start), "s");
    e = expectError([&] { boot.send(&byte, 1, 1, 3); }, "send after the receiver failed");
    RANK_CHECK(contains(e.what(), "rank 0: bootstrap send(peer 1, tag 3): this rank's bootstrap receiver"),
               e.what());
    e = expectError([&] { boot.barrier(); }, "barrier after the receiver failed");
    RANK_CHECK(contains(e.what(), "poll(): Invalid argument"), e.what());
    RANK_CHECK(write(release[1], &byte, 1) == 1);
  }));
  close(release[0]);
  close(release[1]);
}

// ---- rendezvous without the secret cannot be denied ------------------------------------------------------

// 500 connections that never authenticate are opened against the root before the honest ranks start. The
// root keeps the newest 128 and closes the others at once, closes the rest at its handshake deadline, and the
// honest ranks join as soon as they arrive.
TEST(BootstrapHostile, IdleConnectionsDoNotDelayTheRendezvous) {
  const int n = 3, kIdle = 500, kHeld = static_cast<int>(bootstrap::kMaxPendingHandshakes);
  const double timeout = 10;  // rendezvous deadline of the root and the ranks
  const bootstrap::Secret secret = testSecret(7);
  net::Fd listener = loopbackListener();
  const net::SockAddr rootAddr = net::localAddress(listener.get());
  UniqueId id = bootstrap::encodeUniqueId({secret, rootAddr, bootstrap::RootHost::IdCreator});
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);

  std::vector<pid_t> pids;
  pids.push_back(forkProcess(
      [&] {
        std::string log = capturingStderr(
            [&] { bootstrap::RendezvousRoot(std::move(listener), n, secret, timeout).run(-1); });
        // Every idle connection was closed with a WARN: the oldest to make room, the others at their
        // deadline.
        int dropped = countLines(log, "unauthenticated connections are pending (the oldest makes room");
        int expired = countLines(log, ": no authentication within 5s");
        RANK_CHECK(dropped >= kIdle - kHeld && dropped + expired == kIdle, dropped, " dropped, ", expired,
                   " expired:\n", log);
      },
      "root"));
  listener.reset();
  pids.push_back(forkProcess(
      [&] {
        auto opened = Clock::now();
        IdleConnections idle(rootAddr, kIdle, net::Deadline::after(5));
        // The root holds the newest ones and closes the others as it accepts them.
        int open = idle.waitUntilOpenAtMost(kHeld, net::Deadline::after(2));
        RANK_CHECK(open == kHeld, open, " idle connections open, expected ", kHeld);
        for (int rank = 0; rank < n; ++rank) RANK_CHECK(write(ready[1], "x", 1) == 1);
        // The ones it holds it closes at the handshake deadline, well before the rendezvous deadline.
        double limit = bootstrap::handshakeTimeout(timeout) + 1.5;
        open = idle.waitUntilOpenAtMost(0, net::Deadline::after(limit - secondsSince(opened)));
        RANK_CHECK(open == 0, open, " idle connections still open after ", secondsSince(opened), "s");
      },
      "idle connections"));
  for (int rank = 0; rank < n; ++rank) {
    pids.push_back(forkProcess(
        [&, rank] {
          char byte;
          RANK_CHECK(read(ready[0], &byte, 1) == 1);
          auto start = Clock::now();
          TcpBootstrap boot(rank, n, id, timeout);
          boot.barrier();
          RANK_CHECK(secondsSince(start) < 2, "rendezvous took ", secondsSince(start), "s");
        },
        "rank " + std::to_string(rank)));
  }
  close(ready[0]);
  close(ready[1]);
  expectAllSucceeded(waitAll(pids, 20));
}

// Peers 1 and 2 connect to rank 0's listener as honest ranks and each send one message (tag 4).
void sendAsHonestPeers(const net::SockAddr& listener, const bootstrap::Secret& secret, int n,
                       const net::Deadline& deadline, std::vector<net::Fd>* conns) {
  for (int peer = 1; peer < n; ++peer) {
    conns->push_back(authenticatedConnection(listener, secret, peer, 0, deadline));
    auto frame = bootstrap::WireWriter().i32(4).u64(4).i32(peer * 11).data();
    RANK_CHECK(net::sendAll(conns->back().get(), frame.data(), frame.size(), deadline).ok(), "peer ", peer);
  }
}

// Rank 0's peer listener with 500 idle connections: honest peers 1 and 2 deliver their messages at once.
void receiveDespiteIdleConnections(const bootstrap::Secret& secret, int n) {
  const int kHeld = static_cast<int>(bootstrap::kMaxPendingHandshakes);
  net::Fd listener = loopbackListener();
  const net::SockAddr addr = net::localAddress(listener.get());
  bootstrap::Mailbox mailbox(n, 1 << 20);
  // A handshake deadline far above this test's limits: honest peers must not wait for idle ones to expire.
  bootstrap::PeerReceiver receiver(std::move(listener), 0, n, secret, 60, 1 << 20, mailbox);
  IdleConnections idle(addr, 500, net::Deadline::after(5));
  int open = idle.waitUntilOpenAtMost(kHeld, net::Deadline::after(2));
  RANK_CHECK(open == kHeld, open, " idle connections open, expected ", kHeld);

  auto start = Clock::now();
  net::Deadline deadline = net::Deadline::after(3);
  std::vector<net::Fd> peers;
  sendAsHonestPeers(addr, secret, n, deadline, &peers);
  for (int peer = 1; peer < n; ++peer) {
    std::vector<uint8_t> payload;
    std::string reason;
    RANK_CHECK(mailbox.take(peer, 4, deadline, &payload, &reason) == bootstrap::Mailbox::Outcome::Message,
               "peer ", peer, ": ", reason);
    RANK_CHECK(bootstrap::WireReader(payload).i32() == peer * 11, "peer ", peer);
  }
  RANK_CHECK(secondsSince(start) < 2, "took ", secondsSince(start), "s");
}

// The same against a rank's peer listener, which logs each connection it drops.
TEST(BootstrapHostile, IdleConnectionsDoNotDelayPeerMessages) {
  pid_t pid = forkProcess(
      [] {
        std::string log = capturingStderr([] { receiveDespiteIdleConnections(testSecret(8), 3); });
        int dropped = countLines(log, "unauthenticated connections are pending (the oldest makes room");
        RANK_CHECK(dropped >= 500 - static_cast<int>(bootstrap::kMaxPendingHandshakes), dropped,
                   " dropped:\n", log);
      },
      "peer listener");
  expectAllSucceeded(waitAll({pid}, 20));
}

}  // namespace
}  // namespace meshcomm
