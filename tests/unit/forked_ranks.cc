// Forked ranks for CPU tests (see forked_ranks.hpp).
#include "forked_ranks.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "bootstrap/socket.hpp"

namespace meshcomm::test {

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs `body` and returns the Error it throws; fails the rank if it throws nothing.
Error expectError(const std::function<void()>& body, const char* what) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  throw std::runtime_error(std::string(what) + " did not throw");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

pid_t forkProcess(const std::function<void()>& body, const std::string& name) {
  std::fflush(nullptr);  // nothing buffered may be written twice
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) return pid;
  int code = 0;
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[%s] FAILED: %s\n", name.c_str(), e.what());
    code = 1;
  } catch (...) {
    std::fprintf(stderr, "[%s] FAILED: unknown exception\n", name.c_str());
    code = 1;
  }
  std::fflush(nullptr);
  _exit(code);
}

// Waits for every process until `limitSec`; what is still running then is killed and reported as -1.
std::vector<int> waitAll(const std::vector<pid_t>& pids, double limitSec) {
  std::vector<int> statuses(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  auto start = Clock::now();
  size_t left = pids.size();
  while (left > 0 && secondsSince(start) < limitSec) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        statuses[i] = status;
        done[i] = true;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
  }
  return statuses;
}

std::string describeStatus(int status) {
  if (status == -1) return "did not finish in time (killed)";
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

void expectAllSucceeded(const std::vector<int>& statuses) {
  for (size_t i = 0; i < statuses.size(); ++i) {
    EXPECT_TRUE(statuses[i] != -1 && WIFEXITED(statuses[i]) && WEXITSTATUS(statuses[i]) == 0)
        << "process " << i << ": " << describeStatus(statuses[i]);
  }
}

// A port that was free a moment ago on 127.0.0.1.
uint16_t freeLoopbackPort() {
  net::Fd fd;
  if (net::tryListen(net::SockAddr::loopbackV4(0), &fd) != 0)
    throw std::runtime_error("cannot bind 127.0.0.1:0");
  return net::localAddress(fd.get()).port();
}

bootstrap::Secret testSecret(uint8_t seed) {
  bootstrap::Secret s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed * 31 + i);
  return s;
}

// An id whose root rank 0 hosts on a free loopback port.
UniqueId loopbackId(uint8_t secretSeed) {
  return TcpBootstrap::uniqueIdFromAddress("127.0.0.1:" + std::to_string(freeLoopbackPort()),
                                           testSecret(secretSeed));
}

// Forks n ranks that all get `id`.
std::vector<int> runRanks(int n, const UniqueId& id, const RankBody& body, double limitSec) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    pids.push_back(forkProcess([&, r] { body(r, id); }, "rank " + std::to_string(r)));
  return waitAll(pids, limitSec);
}

// Forks n ranks; rank 0 calls createUniqueId(idRanks; default n) (so the root thread runs in a rank, never in
// the test process) and hands the id to the others through pipes.
std::vector<int> runRanksWithCreatedId(int n, const RankBody& body, double limitSec, int idRanks) {
  std::vector<std::array<int, 2>> pipes(n);
  for (auto& p : pipes) {
    if (pipe(p.data()) != 0) throw std::runtime_error("pipe failed");
  }
  auto closeAll = [&](bool readEnds, bool writeEnds, int keepRead) {
    for (int r = 0; r < n; ++r) {
      if (readEnds && r != keepRead) close(pipes[r][0]);
      if (writeEnds) close(pipes[r][1]);
    }
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pids.push_back(forkProcess(
        [&, r] {
          UniqueId id;
          if (r == 0) {
            closeAll(true, false, -1);
            id = TcpBootstrap::createUniqueId(idRanks < 0 ? n : idRanks);
            for (int peer = 1; peer < n; ++peer) {
              RANK_CHECK(write(pipes[peer][1], id.bytes.data(), id.bytes.size()) ==
                         static_cast<ssize_t>(id.bytes.size()));
            }
            closeAll(false, true, -1);
          } else {
            closeAll(true, true, r);  // our read end stays; rank 0's death then reads as EOF
            RANK_CHECK(
                read(pipes[r][0], id.bytes.data(), id.bytes.size()) == static_cast<ssize_t>(id.bytes.size()),
                "no UniqueId from rank 0");
          }
          body(r, id);
        },
        "rank " + std::to_string(r)));
  }
  closeAll(true, true, -1);
  return waitAll(pids, limitSec);
}

}  // namespace meshcomm::test
