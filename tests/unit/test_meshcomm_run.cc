// meshcomm-run, driven as a subprocess: output prefixing, environment, exit codes, signals, timeouts, and an
// end-to-end bootstrap where this very binary runs as the ranks.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "meshcomm/bootstrap.hpp"

namespace meshcomm {
namespace {

// ---- this binary as a rank -------------------------------------------------------------------------------

// When meshcomm-run starts this test binary with MESHCOMM_TEST_RANK_MAIN=1, it acts as one rank instead of
// running the tests: this initializer runs before gtest's main and exits.
int rankMain() {
  try {
    auto boot = TcpBootstrap::fromEnvironment();
    std::vector<int> ranks(boot->size());
    ranks[boot->rank()] = boot->rank();
    boot->allGather(ranks.data(), sizeof(int));
    for (int r = 0; r < boot->size(); ++r) {
      if (ranks[r] != r) throw std::runtime_error("allGather returned wrong data");
    }
    boot->barrier();
    std::printf("bootstrap ok rank %d of %d\n", boot->rank(), boot->size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank failed: %s\n", e.what());
    return 1;
  }
}

[[maybe_unused]] const bool kRanAsRank = [] {
  if (!std::getenv("MESHCOMM_TEST_RANK_MAIN")) return false;
  int code = rankMain();
  std::fflush(nullptr);
  _exit(code);
}();

// ---- running the launcher --------------------------------------------------------------------------------

struct Launch {
  int exitCode = -1;  // -1: still running at the time limit (then killed)
  std::string out, err;
  double seconds = 0;
};

using Clock = std::chrono::steady_clock;

// Runs meshcomm-run with `args` and extra environment variables, capturing its stdout and stderr. `onOutput`
// sees the stdout read so far after every read, with the launcher's pid.
Launch runLauncher(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                   double limitSec = 20,
                   const std::function<void(pid_t, const std::string&)>& onOutput = nullptr) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> argvStrings = {MESHCOMM_RUN_PATH};
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argvStrings) argv.push_back(a.data());
  argv.push_back(nullptr);

  auto start = Clock::now();
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(err[0]);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    execv(argv[0], argv.data());
    std::perror("execv meshcomm-run");
    _exit(126);
  }
  close(out[1]);
  close(err[1]);

  Launch result;
  std::string* sinks[2] = {&result.out, &result.err};
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  while ((fds[0].fd >= 0 || fds[1].fd >= 0) && elapsed() < limitSec) {
    if (poll(fds, 2, 50) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
        if (i == 0 && onOutput) onOutput(pid, result.out);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  if (elapsed() >= limitSec) kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  result.seconds = elapsed();
  if (elapsed() < limitSec)
    result.exitCode = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return result;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.push_back(line);
  return result;
}

std::multiset<std::string> lineSet(const std::string& text) {
  auto l = lines(text);
  return {l.begin(), l.end()};
}

// ---- tests -----------------------------------------------------------------------------------------------

TEST(MeshcommRun, PrefixesEveryLineAndKeepsStreamsApart) {
  Launch r =
      runLauncher({"-n", "3", "--", "sh", "-c", "echo out $RANK; echo err $RANK >&2; echo two; printf tail"});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::multiset<std::string> expectedOut, expectedErr;
  for (int rank = 0; rank < 3; ++rank) {
    std::string p = "[" + std::to_string(rank) + "] ";
    expectedOut.insert(
        {p + "out " + std::to_string(rank), p + "two", p + "tail"});  // the partial line flushed
    expectedErr.insert(p + "err " + std::to_string(rank));
  }
  EXPECT_EQ(lineSet(r.out), expectedOut) << r.out;
  EXPECT_EQ(lineSet(r.err), expectedErr) << r.err;
}

TEST(MeshcommRun, SetsLaunchVariablesAndPassesTheRestThrough) {
  Launch r = runLauncher({"-n", "3", "sh", "-c",
                          "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
                          "$MESHCOMM_BOOTSTRAP_ADDR $MESHCOMM_BOOTSTRAP_SECRET $MESHCOMM_TEST_PASSTHROUGH"},
                         {{"MESHCOMM_TEST_PASSTHROUGH", "kept"}, {"RANK", "99"}, {"WORLD_SIZE", "99"}});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  auto outLines = lines(r.out);
  ASSERT_EQ(outLines.size(), 3u) << r.out;
  std::set<std::string> shared;  // everything after the per-rank fields must be the same for all ranks
  for (const auto& line : outLines) {
    std::istringstream in(line);
    std::string prefix, rank, world, localRank, localWorld, masterAddr, masterPort, bootAddr, secret,
        passthrough;
    in >> prefix >> rank >> world >> localRank >> localWorld >> masterAddr >> masterPort >> bootAddr >>
        secret >> passthrough;
    EXPECT_EQ(prefix, "[" + rank + "]") << line;
    EXPECT_EQ(world, "3");
    EXPECT_EQ(localRank, rank);
    EXPECT_EQ(localWorld, "3");
    EXPECT_EQ(masterAddr, "127.0.0.1");
    int port = std::atoi(masterPort.c_str());
    EXPECT_TRUE(port > 0 && port < 65536) << masterPort;
    EXPECT_EQ(bootAddr.rfind("127.0.0.1:", 0), 0u) << bootAddr;
    EXPECT_NE(bootAddr, "127.0.0.1:" + masterPort);
    EXPECT_EQ(secret.size(), 32u);
    EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
    EXPECT_EQ(passthrough, "kept");
    shared.insert(masterPort + " " + bootAddr + " " + secret);
  }
  EXPECT_EQ(shared.size(), 1u) << r.out;
  std::set<std::string> prefixes;
  for (const auto& line : outLines) prefixes.insert(line.substr(0, 4));
  EXPECT_EQ(prefixes, (std::set<std::string>{"[0] ", "[1] ", "[2] "}));
}

TEST(MeshcommRun, FailingRankStopsTheOthersAndSetsTheExitCode) {
  Launch r = runLauncher({"-n", "3", "--", "sh", "-c", "if [ $RANK = 1 ]; then exit 3; fi; sleep 30"});
  EXPECT_EQ(r.exitCode, 3) << r.err;
  EXPECT_LT(r.seconds, 5.0) << "the sleeping ranks were not stopped promptly";
  EXPECT_NE(r.err.find("meshcomm-run: rank 1 exited with code 3; stopping the other ranks"),
            std::string::npos)
      << r.err;
}

TEST(MeshcommRun, RankKilledBySignalGives128PlusSignal) {
  Launch r = runLauncher({"-n", "2", "sh", "-c", "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 30"});
  EXPECT_EQ(r.exitCode, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  EXPECT_NE(r.err.find("rank 0 was killed by signal 9"), std::string::npos) << r.err;
}

TEST(MeshcommRun, TimeoutStopsEveryRankWith124) {
  Launch r = runLauncher({"-n", "2", "--timeout", "0.5", "--", "sleep", "30"});
  EXPECT_EQ(r.exitCode, 124) << r.err;
  EXPECT_GE(r.seconds, 0.5);
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_NE(r.err.find("ran longer than --timeout 0.5s"), std::string::npos) << r.err;
}

TEST(MeshcommRun, ForwardsSigtermToEveryRank) {
  bool sent = false;
  Launch r = runLauncher(
      {"-n", "2", "sh", "-c", "trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done"},
      {}, 20, [&](pid_t launcher, const std::string& out) {
        if (!sent && lines(out).size() >= 2) {
          kill(launcher, SIGTERM);
          sent = true;
        }
      });
  ASSERT_TRUE(sent) << r.out << r.err;
  EXPECT_EQ(r.exitCode, 5) << r.err;
  EXPECT_EQ(lineSet(r.out),
            (std::multiset<std::string>{"[0] ready", "[1] ready", "[0] got-term", "[1] got-term"}));
}

TEST(MeshcommRun, CommandThatCannotRunGives127) {
  Launch r = runLauncher({"-n", "2", "--", "/nonexistent/meshcomm-no-such-command"});
  EXPECT_EQ(r.exitCode, 127);
  EXPECT_NE(
      r.err.find(
          "meshcomm-run: cannot execute '/nonexistent/meshcomm-no-such-command': No such file or directory"),
      std::string::npos)
      << r.err;
}

TEST(MeshcommRun, UsageAndBadArguments) {
  Launch help = runLauncher({"-h"});
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_EQ(help.out.rfind("Usage: meshcomm-run -n N", 0), 0u) << help.out;
  for (const auto& args : std::vector<std::vector<std::string>>{{"true"},
                                                                {"-n", "0", "true"},
                                                                {"-n", "x", "true"},
                                                                {"-n", "2"},
                                                                {"--bogus", "-n", "2", "true"},
                                                                {"-n", "2", "--timeout", "-1", "true"}}) {
    Launch r = runLauncher(args);
    EXPECT_EQ(r.exitCode, 2) << args[0] << " ...: " << r.err;
    EXPECT_NE(r.err.find("meshcomm-run: "), std::string::npos) << r.err;
  }
}

std::string selfExecutable() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  return std::string(path, static_cast<size_t>(n));
}

TEST(MeshcommRun, RanksBootstrapFromTheLaunchEnvironment) {
  Launch r =
      runLauncher({"-n", "4", "--timeout", "30", "--", selfExecutable()}, {{"MESHCOMM_TEST_RANK_MAIN", "1"}});
  ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
  std::multiset<std::string> expected;
  for (int rank = 0; rank < 4; ++rank) {
    expected.insert("[" + std::to_string(rank) + "] bootstrap ok rank " + std::to_string(rank) + " of 4");
  }
  EXPECT_EQ(lineSet(r.out), expected) << r.out;
}

}  // namespace
}  // namespace meshcomm
