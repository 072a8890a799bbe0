// Forked ranks for CPU tests of multi-process code (bootstrap, split): each test forks its ranks before any
// thread exists in them; a rank reports failure by throwing (the harness prints the message and exits 1).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bootstrap/unique_id.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::test {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t);

// A failed check inside a forked rank.
#define RANK_CHECK(cond, ...)                                                                                \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      throw std::runtime_error(                                                                              \
          ::meshcomm::detail::concat(__FILE__, ":", __LINE__, ": check failed: " #cond " ", ##__VA_ARGS__)); \
    }                                                                                                        \
  } while (0)

// Runs `body` and returns the Error it throws; fails the rank if it throws nothing.
Error expectError(const std::function<void()>& body, const char* what);

bool contains(const std::string& text, const std::string& part);

// Forks a process that runs `body` and exits 0, or 1 after printing what it threw (prefixed by `name`).
pid_t forkProcess(const std::function<void()>& body, const std::string& name);

// Waits for every process until `limitSec`; what is still running then is killed and reported as -1.
std::vector<int> waitAll(const std::vector<pid_t>& pids, double limitSec);

std::string describeStatus(int status);

// A gtest failure for each status that is not a clean exit 0.
void expectAllSucceeded(const std::vector<int>& statuses);

// A port that was free a moment ago on 127.0.0.1.
uint16_t freeLoopbackPort();

bootstrap::Secret testSecret(uint8_t seed);

// An id whose root rank 0 hosts on a free loopback port.
UniqueId loopbackId(uint8_t secretSeed = 1);

using RankBody = std::function<void(int rank, const UniqueId& id)>;

// Forks n ranks that all get `id`.
std::vector<int> runRanks(int n, const UniqueId& id, const RankBody& body, double limitSec = 30);

// Forks n ranks; rank 0 calls createUniqueId(idRanks; default n) (so the root thread runs in a rank, never in
// the test process) and hands the id to the others through pipes.
std::vector<int> runRanksWithCreatedId(int n, const RankBody& body, double limitSec = 30, int idRanks = -1);

}  // namespace meshcomm::test
