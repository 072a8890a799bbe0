// TcpBootstrap across forked processes on loopback. Each test forks its ranks before any thread exists in
// them; a rank reports failure by throwing (the harness prints the message and exits 1).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/handshake.hpp"
#include "bootstrap/root.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id.hpp"
#include "bootstrap/wire.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"
#include "forked_ranks.hpp"
#include "root_client.hpp"

namespace meshcomm {
namespace {

using namespace test;

// ---- socket helpers (in the test process: they start no threads) ----------------------------------------

TEST(BootstrapSocket, AddressesParseAndPrint) {
  EXPECT_EQ(net::SockAddr::parse("[::1]:80").toString(), "[::1]:80");
  EXPECT_TRUE(net::SockAddr::parse("[::1]:80").isLoopback());
  EXPECT_EQ(net::SockAddr::parse("127.0.0.2:65535").toString(), "127.0.0.2:65535");
  EXPECT_TRUE(net::SockAddr::parse("127.0.0.2:1").isLoopback());
  EXPECT_FALSE(net::SockAddr::parse("10.0.0.1:1").isLoopback());
  EXPECT_EQ(net::SockAddr::parse("localhost:5").family(), AF_INET);  // IPv4 preferred
  EXPECT_EQ(net::interfaceAddress("lo").host(), "127.0.0.1");
  try {
    net::interfaceAddress("meshcomm-no-such-if0");
    ADD_FAILURE() << "a missing interface was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "MESHCOMM_SOCKET_IFNAME=meshcomm-no-such-if0")) << e.what();
  }
  net::SockAddr advertised = net::advertisedAddress();
  EXPECT_TRUE(advertised.family() == AF_INET || advertised.family() == AF_INET6);
  EXPECT_EQ(advertised.port(), 0);
}

TEST(BootstrapSocket, ConnectFailsFastWithoutRetryAndAtTheDeadlineWithRetry) {
  net::SockAddr nobody = net::SockAddr::loopbackV4(freeLoopbackPort());
  try {
    net::connectTo(nobody, net::Deadline::after(5), net::ConnectRetry::No, "probe");
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::RemoteError);
    EXPECT_TRUE(contains(e.what(), "probe: cannot connect to " + nobody.toString() + ": Connection refused"))
        << e.what();
  }
  auto start = Clock::now();
  try {
    net::connectTo(nobody, net::Deadline::after(0.3), net::ConnectRetry::UntilDeadline, "probe");
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    EXPECT_TRUE(contains(e.what(), "within 0.3s (last error: Connection refused)")) << e.what();
  }
  EXPECT_GE(secondsSince(start), 0.3);
  EXPECT_LT(secondsSince(start), 1.0);
}

TEST(BootstrapSocket, ConnectRetriesUntilTheListenerAppears) {
  uint16_t port = freeLoopbackPort();
  pid_t late = forkProcess(
      [port] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        net::Fd listener;
        RANK_CHECK(net::tryListen(net::SockAddr::loopbackV4(port), &listener) == 0);
        net::Deadline deadline = net::Deadline::after(5);
        RANK_CHECK(net::waitReady(listener.get(), POLLIN, deadline).ok());
        int err = 0;
        net::SockAddr remote;
        net::Fd conn = net::acceptConnection(listener.get(), &remote, &err);
        RANK_CHECK(conn.valid() && remote.isLoopback());
        RANK_CHECK(net::sendAll(conn.get(), "hi", 2, deadline).ok());
      },
      "late listener");
  net::Deadline deadline = net::Deadline::after(5);
  net::Fd fd =
      net::connectTo(net::SockAddr::loopbackV4(port), deadline, net::ConnectRetry::UntilDeadline, "t");
  char buf[2];
  ASSERT_TRUE(net::recvAll(fd.get(), buf, 2, deadline).ok());
  EXPECT_EQ(std::string(buf, 2), "hi");
  expectAllSucceeded(waitAll({late}, 10));
}

std::pair<net::Fd, net::Fd> socketPair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  return {net::Fd(sv[0]), net::Fd(sv[1])};
}

TEST(BootstrapSocket, TransfersHonourTheDeadlineAndReportEof) {
  // Nobody reads: the send buffer fills and sendAll gives up at its deadline.
  auto [full, unread] = socketPair();
  std::vector<char> huge(8 << 20, 'y');
  auto start = Clock::now();
  EXPECT_EQ(net::sendAll(full.get(), huge.data(), huge.size(), net::Deadline::after(0.2)).result,
            net::IoResult::TimedOut);
  EXPECT_GE(secondsSince(start), 0.2);

  // A message in two parts arrives whole.
  auto [a, b] = socketPair();
  char header[3] = {'a', 'b', 'c'};
  std::vector<char> body(60000, 'x');
  ASSERT_TRUE(net::sendAll(a.get(), {{header, 3}, {body.data(), body.size()}}, net::Deadline::after(5)).ok());
  std::vector<char> got(3 + body.size());
  ASSERT_TRUE(net::recvAll(b.get(), got.data(), got.size(), net::Deadline::after(5)).ok());
  EXPECT_EQ(std::string(got.begin(), got.begin() + 3), "abc");
  EXPECT_EQ(std::count(got.begin() + 3, got.end(), 'x'), 60000);

  // Nothing more: a timeout; then the writer closes: EOF.
  start = Clock::now();
  char one;
  EXPECT_EQ(net::recvAll(b.get(), &one, 1, net::Deadline::after(0.2)).result, net::IoResult::TimedOut);
  EXPECT_GE(secondsSince(start), 0.2);
  a.reset();
  EXPECT_EQ(net::recvAll(b.get(), &one, 1, net::Deadline::after(5)).result, net::IoResult::Closed);
}

// ---- collectives -----------------------------------------------------------------------------------------

// The bytes rank `owner` contributes in `round`: every rank can recompute anyone's data.
std::vector<uint8_t> roundData(int round, int owner, size_t bytes) {
  std::mt19937_64 rng(static_cast<uint64_t>(round) * 1000003u + static_cast<uint64_t>(owner));
  std::vector<uint8_t> v(bytes);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void checkTopology(TcpBootstrap& boot, int rank, int n) {
  RANK_CHECK(boot.rank() == rank && boot.size() == n);
  RANK_CHECK(boot.nRanksPerNode() == n, "all ranks run on this host, got ", boot.nRanksPerNode());
  RANK_CHECK(boot.localRank() == rank, "got ", boot.localRank());
  for (int r = 0; r < n; ++r) RANK_CHECK(boot.hostId(r) == bootstrap::localHostId(), "rank ", r);
}

void allGatherRounds(TcpBootstrap& boot, int rank, int n) {
  const size_t sizes[] = {1, 8, 1000, 65536 + 3, 0, 13};
  for (int round = 0; round < 6; ++round) {
    size_t bytes = sizes[round];
    std::vector<uint8_t> buffer(bytes * n, 0xEE);
    auto mine = roundData(round, rank, bytes);
    std::copy(mine.begin(), mine.end(), buffer.begin() + rank * bytes);
    boot.allGather(buffer.data(), bytes);
    for (int r = 0; r < n; ++r) {
      auto expected = roundData(round, r, bytes);
      RANK_CHECK(std::equal(expected.begin(), expected.end(), buffer.begin() + r * bytes), "round ", round,
                 " slice of rank ", r);
    }
  }
}

void broadcastRounds(TcpBootstrap& boot, int rank, int n) {
  for (int round = 0; round < 6; ++round) {
    int root = (round * 5 + 1) % n;
    size_t bytes = 1 + static_cast<size_t>(round) * 4099;
    auto expected = roundData(100 + round, root, bytes);
    std::vector<uint8_t> buffer = rank == root ? expected : std::vector<uint8_t>(bytes, 0xEE);
    boot.broadcast(buffer.data(), bytes, root);
    RANK_CHECK(buffer == expected, "round ", round, " root ", root);
  }
}

struct CollectiveCase {
  int nRanks;
  bool createdId;  // createUniqueId in rank 0, else uniqueIdFromAddress (root hosted by rank 0)
};

void PrintTo(const CollectiveCase& c, std::ostream* os) {
  *os << c.nRanks << " ranks, " << (c.createdId ? "createUniqueId" : "uniqueIdFromAddress");
}

class BootstrapCollectives : public ::testing::TestWithParam<CollectiveCase> {};

TEST_P(BootstrapCollectives, AllGatherBroadcastBarrierWithRandomData) {
  const int n = GetParam().nRanks;
  RankBody body = [n](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    checkTopology(boot, rank, n);
    allGatherRounds(boot, rank, n);
    boot.barrier();
    broadcastRounds(boot, rank, n);
    // Back-to-back collectives of both kinds stay in step (FIFO per tag).
    for (int i = 0; i < 20; ++i) {
      int value = rank * 100 + i;
      std::vector<int> all(n);
      all[rank] = value;
      boot.allGather(all.data(), sizeof(int));
      for (int r = 0; r < n; ++r) RANK_CHECK(all[r] == r * 100 + i, "iteration ", i);
      int b = rank == i % n ? 7000 + i : -1;
      boot.broadcast(&b, sizeof(b), i % n);
      RANK_CHECK(b == 7000 + i);
      boot.barrier();
    }
  };
  auto statuses = GetParam().createdId ? runRanksWithCreatedId(n, body) : runRanks(n, loopbackId(), body);
  expectAllSucceeded(statuses);
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapCollectives,
                         ::testing::Values(CollectiveCase{2, false}, CollectiveCase{3, true},
                                           CollectiveCase{8, false}, CollectiveCase{16, true}),
                         [](const auto& info) {
                           return std::to_string(info.param.nRanks) +
                                  (info.param.createdId ? "_createdId" : "_fromAddress");
                         });

// An id created without a size (as ncclGetUniqueId) takes it from the first rank that joins.
TEST(Bootstrap, CreatedIdWithoutSizeLearnsItFromTheRanks) {
  const int n = 5;
  RankBody body = [n](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    checkTopology(boot, rank, n);
    allGatherRounds(boot, rank, n);
    boot.barrier();
  };
  expectAllSucceeded(runRanksWithCreatedId(n, body, 30, /*idRanks=*/0));
}

TEST(Bootstrap, BarrierReleasesNoRankBeforeTheLastArrives) {
  const int n = 4;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    boot.barrier();
    for (int round = 0; round < 3; ++round) {
      // In each round a different rank arrives 150 ms late.
      int late = (round + 1) % n;
      auto roundStart = Clock::now();
      if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      boot.barrier();
      RANK_CHECK(secondsSince(roundStart) >= 0.14, "round ", round, ": left the barrier after ",
                 secondsSince(roundStart), "s, before rank ", late, " arrived");
      boot.barrier();  // the next round starts together
    }
  }));
}

// ---- point to point --------------------------------------------------------------------------------------

std::vector<uint8_t> taggedMessage(int from, int to, int tag, int seq) {
  std::vector<uint8_t> v = roundData(seq * 7 + tag, from * 64 + to, 8 + static_cast<size_t>(seq % 37));
  std::memcpy(v.data(), &seq, sizeof(seq));
  return v;
}

TEST(Bootstrap, TaggedMessagesArriveInOrderPerTag) {
  const int n = 3, kTags = 5, kPerTag = 40;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    // Send to every peer (and to ourselves), interleaving tags.
    for (int seq = 0; seq < kPerTag; ++seq) {
      for (int tag = 0; tag < kTags; ++tag) {
        for (int peer = 0; peer < n; ++peer) {
          auto m = taggedMessage(rank, peer, tag, seq);
          boot.send(m.data(), m.size(), peer, tag);
        }
      }
    }
    // Receive tag by tag, highest first: other tags' messages wait in their own queues.
    for (int tag = kTags - 1; tag >= 0; --tag) {
      for (int peer = 0; peer < n; ++peer) {
        for (int seq = 0; seq < kPerTag; ++seq) {
          auto expected = taggedMessage(peer, rank, tag, seq);
          std::vector<uint8_t> got(expected.size());
          boot.recv(got.data(), got.size(), peer, tag);
          RANK_CHECK(got == expected, "peer ", peer, " tag ", tag, " seq ", seq);
        }
      }
    }
    // Variable-size byte strings, including empty ones.
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    for (size_t len : {0, 1, 100, 70000}) {
      std::vector<char> out(len, static_cast<char>('a' + rank));
      boot.sendBytes(out, next, 99);
      std::vector<char> in = boot.recvBytes(prev, 99);
      RANK_CHECK(in == std::vector<char>(len, static_cast<char>('a' + prev)), "length ", len);
    }
    boot.barrier();
  }));
}

TEST(Bootstrap, RecvSizeMismatchAndInvalidArgumentsAreNamed) {
  expectAllSucceeded(runRanks(2, loopbackId(), [](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, 2, id, 20);
    if (rank == 1) {
      uint64_t eight = 8;
      boot.send(&eight, sizeof(eight), 0, 3);
    } else {
      uint32_t four;
      Error e = expectError([&] { boot.recv(&four, sizeof(four), 1, 3); }, "recv of the wrong size");
      RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
      RANK_CHECK(
          contains(e.what(), "rank 0: bootstrap recv(peer 1, tag 3): expected 4 bytes but peer 1 sent 8"),
          e.what());
      e = expectError([&] { boot.send(&four, 4, 0, -1); }, "negative tag");
      RANK_CHECK(e.code() == ErrorCode::InvalidUsage && contains(e.what(), "tags must be >= 0"), e.what());
      e = expectError([&] { boot.recv(&four, 4, 2, 0); }, "peer out of range");
      RANK_CHECK(e.code() == ErrorCode::InvalidUsage && contains(e.what(), "peer out of range"), e.what());
      e = expectError([&] { boot.broadcast(&four, 4, 5); }, "broadcast root out of range");
      RANK_CHECK(e.code() == ErrorCode::InvalidUsage, e.what());
    }
    boot.barrier();
  }));
}

TEST(Bootstrap, OversizedMessagesAreRejectedAtBothEnds) {
  expectAllSucceeded(runRanks(2, loopbackId(), [](int rank, const UniqueId& id) {
    // The receiver accepts at most 1 KiB; the sender believes 1 MiB is fine.
    setenv("MESHCOMM_BOOTSTRAP_MAX_MESSAGE", rank == 0 ? "1024" : "1048576", 1);
    TcpBootstrap boot(rank, 2, id, 20);
    if (rank == 1) {
      std::vector<uint8_t> big(4096, 1), huge(2 << 20, 1);
      boot.send(big.data(), big.size(), 0, 0);
      Error e = expectError([&] { boot.send(huge.data(), huge.size(), 0, 0); }, "send above the local limit");
      RANK_CHECK(
          e.code() == ErrorCode::InvalidUsage && contains(e.what(), "MESHCOMM_BOOTSTRAP_MAX_MESSAGE=1048576"),
          e.what());
      // Wait until rank 0 has seen the rejection (it closes our data connection, so use a fresh tag of ours).
      char done;
      boot.recv(&done, 1, 0, 1);
    } else {
      std::vector<uint8_t> buffer(4096);
      Error e =
          expectError([&] { boot.recv(buffer.data(), buffer.size(), 1, 0); }, "recv of an oversized message");
      RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
      RANK_CHECK(
          contains(e.what(), "message of 4096 bytes (tag 0), more than MESHCOMM_BOOTSTRAP_MAX_MESSAGE=1024"),
          e.what());
      char done = 1;
      boot.send(&done, 1, 1, 1);
    }
  }));
}

// ---- failures --------------------------------------------------------------------------------------------

TEST(Bootstrap, RecvWithoutSenderTimesOut) {
  expectAllSucceeded(runRanks(2, loopbackId(), [](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, 2, id, rank == 0 ? 1.0 : 10.0);
    if (rank == 0) {
      int value;
      auto start = Clock::now();
      Error e = expectError([&] { boot.recv(&value, sizeof(value), 1, 5); }, "recv with no sender");
      double elapsed = secondsSince(start);
      RANK_CHECK(e.code() == ErrorCode::Timeout, e.what());
      RANK_CHECK(contains(e.what(), "rank 0: bootstrap recv from peer 1 tag 5 timed out after 1s"), e.what());
      RANK_CHECK(elapsed >= 0.95 && elapsed < 2.0, "timed out after ", elapsed, "s");
    }
    boot.barrier();
  }));
}

TEST(Bootstrap, RecvFromAPeerThatExitedFailsAtOnce) {
  expectAllSucceeded(runRanks(2, loopbackId(), [](int rank, const UniqueId& id) {
    auto boot = std::make_unique<TcpBootstrap>(rank, 2, id, 10);
    if (rank == 1) {
      int value = 42;
      boot->send(&value, sizeof(value), 0, 1);
      boot.reset();  // closes our connections: rank 0 sees the end of the stream
      return;
    }
    int value = 0;
    boot->recv(&value, sizeof(value), 1, 1);  // sent before the peer left: still delivered
    RANK_CHECK(value == 42);
    auto start = Clock::now();
    Error e = expectError([&] { boot->recv(&value, sizeof(value), 1, 2); }, "recv from a peer that exited");
    RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
    RANK_CHECK(contains(e.what(), "rank 0: bootstrap recv(peer 1, tag 2): peer closed the connection"),
               e.what());
    RANK_CHECK(secondsSince(start) < 1.0, "took ", secondsSince(start), "s although the timeout is 10s");
  }));
}

TEST(Bootstrap, KilledRankMakesEveryOtherRankFailWithinTheTimeout) {
  const int n = 4, victim = 2;
  const double timeout = 3;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  UniqueId id = loopbackId();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pids.push_back(forkProcess(
        [&, rank] {
          close(ready[0]);
          TcpBootstrap boot(rank, n, id, timeout);
          boot.barrier();
          if (rank == victim) RANK_CHECK(write(ready[1], "x", 1) == 1);
          close(ready[1]);
          // Collectives until the victim's death reaches us; each call's duration is bounded.
          for (int i = 0; i < 100000; ++i) {
            std::vector<int> all(n);
            auto start = Clock::now();
            try {
              boot.allGather(all.data(), sizeof(int));
              boot.barrier();
            } catch (const Error& e) {
              double elapsed = secondsSince(start);
              RANK_CHECK(e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout, e.what());
              RANK_CHECK(elapsed < timeout + 1, "failed only after ", elapsed, "s: ", e.what());
              return;
            }
          }
          RANK_CHECK(rank == victim, "never noticed the killed rank");
        },
        "rank " + std::to_string(rank)));
  }
  close(ready[1]);
  char byte;
  pollfd p{ready[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "the victim never got going";
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // mid-run
  kill(pids[victim], SIGKILL);

  auto statuses = waitAll(pids, 15);
  for (int rank = 0; rank < n; ++rank) {
    if (rank == victim) {
      EXPECT_TRUE(WIFSIGNALED(statuses[rank]) && WTERMSIG(statuses[rank]) == SIGKILL)
          << describeStatus(statuses[rank]);
    } else {
      EXPECT_TRUE(WIFEXITED(statuses[rank]) && WEXITSTATUS(statuses[rank]) == 0)
          << "rank " << rank << ": " << describeStatus(statuses[rank]);
    }
  }
}

TEST(Bootstrap, MissingRankFailsTheRendezvousWithinTheTimeout) {
  const int n = 3;
  expectAllSucceeded(runRanks(2, loopbackId(), [n](int rank, const UniqueId& id) {  // rank 2 never starts
    auto start = Clock::now();
    Error e = expectError([&] { TcpBootstrap boot(rank, n, id, 1.0); }, "rendezvous without rank 2");
    RANK_CHECK(e.code() == ErrorCode::Timeout || e.code() == ErrorCode::RemoteError, e.what());
    RANK_CHECK(contains(e.what(), "waiting for"), e.what());
    RANK_CHECK(secondsSince(start) < 2.0, "took ", secondsSince(start), "s");
  }));
}

// A rank with the wrong secret is turned away, as are raw connections with a bad proof or none at all, and
// the honest ranks complete meanwhile. Honest rank 1 joins only after the impostor was rejected, so the root
// is certainly still listening when the impostor knocks.
TEST(Bootstrap, WrongSecretIsRejectedAndHonestRanksComplete) {
  const int n = 3;
  const uint16_t port = freeLoopbackPort();
  const std::string rootAddress = "127.0.0.1:" + std::to_string(port);
  UniqueId honest = TcpBootstrap::uniqueIdFromAddress(rootAddress, testSecret(1));
  UniqueId impostor = TcpBootstrap::uniqueIdFromAddress(rootAddress, testSecret(2));
  int impostorDone[2], honestDone[2];
  ASSERT_EQ(pipe(impostorDone), 0);
  ASSERT_EQ(pipe(honestDone), 0);

  std::vector<pid_t> pids;
  pids.push_back(forkProcess(
      [&] {
        close(impostorDone[0]);
        close(honestDone[1]);
        net::Deadline deadline = net::Deadline::after(5);
        // A silent connection that never authenticates must not hold anyone up.
        net::Fd silent = net::connectTo(net::SockAddr::loopbackV4(port), deadline,
                                        net::ConnectRetry::UntilDeadline, "silent client");
        // A raw client with a well-formed proof but a made-up MAC gets the challenge, then the connection
        // closes without an answer.
        net::Fd raw = net::connectTo(net::SockAddr::loopbackV4(port), deadline,
                                     net::ConnectRetry::UntilDeadline, "raw client");
        uint8_t challenge[16], answer[8];
        RANK_CHECK(net::recvAll(raw.get(), challenge, sizeof(challenge), deadline).ok());
        auto bogus = bootstrap::WireWriter().u64(bootstrap::kWireMagic).i32(0).u64(1).u64(0xdeadbeef).data();
        RANK_CHECK(net::sendAll(raw.get(), bogus.data(), bogus.size(), deadline).ok());
        RANK_CHECK(net::recvAll(raw.get(), answer, sizeof(answer), deadline).result == net::IoResult::Closed,
                   "the root answered a bogus proof");
        // A full rank with the wrong secret.
        Error e = expectError([&] { TcpBootstrap boot(1, n, impostor, 5); }, "joining with the wrong secret");
        RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
        RANK_CHECK(contains(e.what(), "rejected this rank's proof of the secret"), e.what());
        RANK_CHECK(write(impostorDone[1], "x", 1) == 1);
        char byte;
        RANK_CHECK(read(honestDone[0], &byte, 1) == 1,
                   "the honest ranks did not complete");  // `silent` stays open
      },
      "impostor"));
  close(impostorDone[1]);
  close(honestDone[0]);
  for (int rank = 0; rank < n; ++rank) {
    pids.push_back(forkProcess(
        [&, rank] {
          if (rank == 1) {
            char byte;
            RANK_CHECK(read(impostorDone[0], &byte, 1) == 1, "the impostor did not finish");
          }
          close(impostorDone[0]);
          TcpBootstrap boot(rank, n, honest, 10);
          std::vector<int> all(n);
          all[rank] = rank + 10;
          boot.allGather(all.data(), sizeof(int));
          for (int r = 0; r < n; ++r) RANK_CHECK(all[r] == r + 10);
          boot.barrier();
          if (rank == 0) RANK_CHECK(write(honestDone[1], "x", 1) == 1);
          close(honestDone[1]);
        },
        "rank " + std::to_string(rank)));
  }
  close(impostorDone[0]);
  close(honestDone[1]);
  expectAllSucceeded(waitAll(pids, 30));
}

TEST(Bootstrap, FakeRootIsRejectedByTheRank) {
  // A "root" that answers the handshake without knowing the secret.
  net::Fd listener;
  ASSERT_EQ(net::tryListen(net::SockAddr::loopbackV4(0), &listener), 0);
  uint16_t port = net::localAddress(listener.get()).port();
  UniqueId id = TcpBootstrap::uniqueIdFromAddress("127.0.0.1:" + std::to_string(port), testSecret(1));
  pid_t fake = forkProcess(
      [&] {
        net::Deadline deadline = net::Deadline::after(10);
        RANK_CHECK(net::waitReady(listener.get(), POLLIN, deadline).ok());
        int err = 0;
        net::SockAddr remote;
        net::Fd conn = net::acceptConnection(listener.get(), &remote, &err);
        RANK_CHECK(conn.valid(), "accept: ", err);
        auto challenge = bootstrap::WireWriter().u64(bootstrap::kWireMagic).u64(12345).data();
        uint8_t proof[28], answer[8] = {1, 2, 3};
        RANK_CHECK(net::sendAll(conn.get(), challenge.data(), challenge.size(), deadline).ok());
        RANK_CHECK(net::recvAll(conn.get(), proof, sizeof(proof), deadline).ok());
        RANK_CHECK(net::sendAll(conn.get(), answer, sizeof(answer), deadline).ok());
        uint8_t more;
        // The rank must hang up instead of sending its endpoint.
        RANK_CHECK(net::recvAll(conn.get(), &more, 1, deadline).result == net::IoResult::Closed);
      },
      "fake root");
  pid_t rank = forkProcess(
      [&] {
        listener.reset();
        // Rank 1 of a job whose root rank 0 hosts: it only connects.
        Error e = expectError([&] { TcpBootstrap boot(1, 2, id, 5); }, "rendezvous with a fake root");
        RANK_CHECK(e.code() == ErrorCode::RemoteError, e.what());
        RANK_CHECK(contains(e.what(), "failed to prove that it knows the bootstrap secret"), e.what());
      },
      "rank 1");
  listener.reset();
  expectAllSucceeded(waitAll({fake, rank}, 20));
}

// The root on its own, driven with raw protocol clients from the test process (one at a time, so the order in
// which the root sees them is fixed).
TEST(BootstrapRoot, RejectsDuplicateOutOfRangeAndMismatchedRanksAndFreesLeftSlots) {
  const bootstrap::Secret secret = testSecret(4);
  net::Fd listener;
  ASSERT_EQ(net::tryListen(net::SockAddr::loopbackV4(0), &listener), 0);
  const net::SockAddr rootAddr = net::localAddress(listener.get());
  pid_t root =
      forkProcess([&] { bootstrap::RendezvousRoot(std::move(listener), 2, secret, 10).run(-1); }, "root");
  listener.reset();

  net::Deadline deadline = net::Deadline::after(10);
  auto join = [&](int rank, int nRanks) { return joinRoot(rootAddr, secret, rank, nRanks, deadline); };
  auto readReply = [&](const net::Fd& fd, uint32_t* kind) { return readRootReply(fd, kind, deadline); };
  auto expectRejected = [&](const net::Fd& fd, const std::string& part) {
    uint32_t kind = 0;
    std::vector<uint8_t> text = readReply(fd, &kind);
    EXPECT_EQ(kind, bootstrap::kReplyError);
    EXPECT_TRUE(contains(std::string(text.begin(), text.end()), part))
        << std::string(text.begin(), text.end());
  };

  join(0, 2).reset();  // joins and leaves: its slot frees up
  net::Fd first = join(0, 2);
  expectRejected(join(0, 2), "rank 0 already joined from 127.0.0.1:");
  expectRejected(join(1, 3), "rank 1 was started with nRanks=3 but this job has 2 ranks");
  expectRejected(join(5, 2), "rank 5 is out of range for nRanks=2");
  net::Fd second = join(1, 2);
  for (const net::Fd* fd : {&first, &second}) {
    uint32_t kind = 0;
    std::vector<uint8_t> table = readReply(*fd, &kind);
    ASSERT_EQ(kind, bootstrap::kReplyTable);
    bootstrap::WireReader r(table);
    for (int rank = 0; rank < 2; ++rank) {
      auto e = bootstrap::readEndpoint(r);
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ(e->addr.toString(), "127.0.0.1:" + std::to_string(1000 + rank));
      EXPECT_EQ(e->hostId, 77u);
    }
  }
  expectAllSucceeded(waitAll({root}, 10));
}

TEST(Bootstrap, PortInUseGivesAClearError) {
  // No thread starts before the root's bind fails, so this runs in the test process.
  net::Fd holder;
  ASSERT_EQ(net::tryListen(net::SockAddr::loopbackV4(0), &holder), 0);
  std::string address = "127.0.0.1:" + std::to_string(net::localAddress(holder.get()).port());
  try {
    TcpBootstrap boot(0, 2, TcpBootstrap::uniqueIdFromAddress(address, testSecret(1)), 1);
    FAIL() << "rank 0 bound a port that is in use";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::SystemError);
    EXPECT_TRUE(
        contains(e.what(), "rank 0: bootstrap root cannot listen on " + address +
                               ": Address already in use (set MESHCOMM_BOOTSTRAP_ADDR or MASTER_PORT)"))
        << e.what();
  }
}

// ---- ids and the environment -----------------------------------------------------------------------------

TEST(Bootstrap, CreateUniqueIdRefusesANonPositiveTimeout) {
  for (const char* value : {"0", "-5"}) {
    setenv("MESHCOMM_BOOTSTRAP_TIMEOUT", value, 1);
    try {
      TcpBootstrap::createUniqueId(2);  // refused before a root thread starts
      ADD_FAILURE() << "MESHCOMM_BOOTSTRAP_TIMEOUT=" << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
      EXPECT_TRUE(contains(e.what(), std::string("MESHCOMM_BOOTSTRAP_TIMEOUT=") + value +
                                         " must be a positive number of seconds"))
          << e.what();
    }
  }
  unsetenv("MESHCOMM_BOOTSTRAP_TIMEOUT");
}

TEST(Bootstrap, UniqueIdEncodesAddressAndSecret) {
  auto secret = testSecret(9);
  bootstrap::IdContents v4 =
      bootstrap::decodeUniqueId(TcpBootstrap::uniqueIdFromAddress("10.1.2.3:29501", secret), "t");
  EXPECT_EQ(v4.root.toString(), "10.1.2.3:29501");
  EXPECT_EQ(v4.secret, secret);
  EXPECT_EQ(v4.rootHost, bootstrap::RootHost::Rank0);
  UniqueId id6 = TcpBootstrap::uniqueIdFromAddress("[fd00::2]:80", secret);
  EXPECT_EQ(bootstrap::decodeUniqueId(id6, "t").root.toString(), "[fd00::2]:80");
  // Layout from bootstrap.hpp: family at 24 (little-endian), port at 26 (network order), address at 28.
  EXPECT_EQ(id6.bytes[24] | (id6.bytes[25] << 8), AF_INET6);
  EXPECT_EQ((id6.bytes[26] << 8) | id6.bytes[27], 80);
  EXPECT_EQ(id6.bytes[28], 0xfd);
  EXPECT_TRUE(std::equal(secret.begin(), secret.end(), id6.bytes.begin() + 8));

  for (const char* bad : {"nohost", "10.0.0.1:0", "10.0.0.1:70000", "fd00::2:80", ":80", "[fd00::2]80"}) {
    try {
      TcpBootstrap::uniqueIdFromAddress(bad, secret);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << bad;
    }
  }
  try {
    TcpBootstrap boot(0, 2, UniqueId{}, 1);  // fails while decoding: no thread starts
    FAIL() << "an all-zero UniqueId was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_TRUE(contains(e.what(), "not a meshcomm id")) << e.what();
  }
}

TEST(Bootstrap, WorksOverIpv6Loopback) {
  net::Fd fd;
  int err = net::tryListen(net::SockAddr::resolve("::1", 0), &fd);
  if (err == EADDRNOTAVAIL || err == EAFNOSUPPORT) GTEST_SKIP() << "no IPv6 loopback here";
  ASSERT_EQ(err, 0) << std::strerror(err);
  std::string address = "[::1]:" + std::to_string(net::localAddress(fd.get()).port());
  fd.reset();
  expectAllSucceeded(runRanks(3, TcpBootstrap::uniqueIdFromAddress(address, testSecret(3)),
                              [](int rank, const UniqueId& id) {
                                TcpBootstrap boot(rank, 3, id, 10);
                                std::vector<int> all(3);
                                all[rank] = rank * 3;
                                boot.allGather(all.data(), sizeof(int));
                                RANK_CHECK(all == std::vector<int>({0, 3, 6}));
                              }));
}

// Clears the launch variables for the duration of a test and restores them afterwards.
class LaunchEnvGuard {
 public:
  LaunchEnvGuard() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_.push_back(v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
  }
  ~LaunchEnvGuard() {
    for (size_t i = 0; i < std::size(kNames); ++i) {
      if (saved_[i])
        setenv(kNames[i], saved_[i]->c_str(), 1);
      else
        unsetenv(kNames[i]);
    }
  }

  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "TORCHELASTIC_RUN_ID",
                                           "MESHCOMM_BOOTSTRAP_ADDR",
                                           "MESHCOMM_BOOTSTRAP_SECRET",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS"};

 private:
  std::vector<std::optional<std::string>> saved_;
};

void setLaunchEnv(int rank, int n) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
}

void allGatherRanks(Bootstrap& boot) {
  std::vector<int> all(boot.size());
  all[boot.rank()] = boot.rank();
  boot.allGather(all.data(), sizeof(int));
  for (int r = 0; r < boot.size(); ++r) RANK_CHECK(all[r] == r);
}

TEST(Bootstrap, FromEnvironmentWithExplicitAddressAndSecret) {
  LaunchEnvGuard guard;
  const int n = 3;
  std::string address = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  std::string secretHex = bootstrap::secretToHex(testSecret(5));
  expectAllSucceeded(runRanks(n, UniqueId{}, [&](int rank, const UniqueId&) {
    setLaunchEnv(rank, n);
    setenv("MESHCOMM_BOOTSTRAP_ADDR", address.c_str(), 1);
    setenv("MESHCOMM_BOOTSTRAP_SECRET", secretHex.c_str(), 1);
    auto boot = TcpBootstrap::fromEnvironment();
    RANK_CHECK(boot->rank() == rank && boot->size() == n);
    allGatherRanks(*boot);
  }));
}

// MASTER_PORT itself is held, as torch's TCPStore would hold it: the root must use MASTER_PORT+1.
TEST(Bootstrap, FromEnvironmentWithMasterAddrUsesTheNextPortAndADerivedSecret) {
  LaunchEnvGuard guard;
  const int n = 2;
  net::Fd store;
  uint16_t masterPort = 0;
  for (int attempt = 0; attempt < 50 && masterPort == 0; ++attempt) {
    ASSERT_EQ(net::tryListen(net::SockAddr::loopbackV4(0), &store), 0);
    uint16_t p = net::localAddress(store.get()).port();
    net::Fd next;
    if (p < 65535 && net::tryListen(net::SockAddr::loopbackV4(p + 1), &next) == 0) masterPort = p;
  }
  ASSERT_NE(masterPort, 0) << "no two consecutive free ports";
  expectAllSucceeded(runRanks(n, UniqueId{}, [&](int rank, const UniqueId&) {
    store.reset();  // the test process keeps holding it
    setLaunchEnv(rank, n);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(masterPort).c_str(), 1);
    setenv("TORCHELASTIC_RUN_ID", "job-42", 1);
    auto boot = TcpBootstrap::fromEnvironment();
    allGatherRanks(*boot);
  }));
}

TEST(Bootstrap, FromEnvironmentWithoutALauncherIsOneRank) {
  LaunchEnvGuard guard;  // no launcher variables at all
  expectAllSucceeded(runRanks(1, UniqueId{}, [](int, const UniqueId&) {
    auto boot = TcpBootstrap::fromEnvironment();
    RANK_CHECK(boot->rank() == 0 && boot->size() == 1 && boot->nRanksPerNode() == 1);
    allGatherRanks(*boot);
    boot->barrier();
  }));
}

TEST(Bootstrap, FromEnvironmentErrorsNameWhatToSet) {
  LaunchEnvGuard guard;
  setLaunchEnv(1, 2);
  auto expectInvalid = [](const std::string& part) {
    try {
      TcpBootstrap::fromEnvironment();  // every case fails before a thread starts
      ADD_FAILURE() << "fromEnvironment succeeded; expected an error naming " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
      EXPECT_TRUE(contains(e.what(), part)) << e.what();
    }
  };
  expectInvalid("set MESHCOMM_BOOTSTRAP_ADDR=host:port, or MASTER_ADDR and MASTER_PORT");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "http", 1);
  expectInvalid("MASTER_PORT='http' is not a port number");
  setenv("MESHCOMM_BOOTSTRAP_ADDR", "127.0.0.1:1234", 1);
  setenv("MESHCOMM_BOOTSTRAP_SECRET", "0123456789abcdef0123456789abcdeZ", 1);
  expectInvalid("MESHCOMM_BOOTSTRAP_SECRET must be exactly 32 hex digits");
  setenv("MESHCOMM_BOOTSTRAP_SECRET", "abc", 1);
  expectInvalid("MESHCOMM_BOOTSTRAP_SECRET must be exactly 32 hex digits");
  unsetenv("MESHCOMM_BOOTSTRAP_SECRET");
  setenv("MESHCOMM_BOOTSTRAP_ADDR", "127.0.0.1", 1);
  expectInvalid("is not of the form host:port");
  setenv("WORLD_SIZE", "x", 1);
  expectInvalid("WORLD_SIZE='x'");
}

}  // namespace
}  // namespace meshcomm
