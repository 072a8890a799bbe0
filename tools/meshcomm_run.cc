// meshcomm-run: starts N ranks of a command on this host with torchrun's environment variables plus a
// bootstrap address and a random secret, prefixes every output line with "[rank] ", forwards SIGINT, SIGTERM
// and SIGHUP, and stops the whole job as soon as one rank fails. docs/bootstrap.md describes it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExecute = 127;
constexpr auto kKillGrace = std::chrono::seconds(3);           // SIGTERM, then SIGKILL after this
constexpr auto kDrainGrace = std::chrono::milliseconds(1000);  // output still read after the last rank exits
constexpr size_t kMaxLine = 64 * 1024;                         // longer lines are emitted in pieces

const char* const kUsage =
    "Usage: meshcomm-run -n N [--timeout SEC] [--] command [args...]\n"
    "\n"
    "Starts N ranks of `command` on this host and waits for them.\n"
    "\n"
    "  -n, --nproc N    number of ranks (1-4096)\n"
    "  --timeout SEC    stop every rank and exit 124 when the job runs longer than SEC seconds\n"
    "  -h, --help       print this help\n"
    "\n"
    "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a "
    "free\n"
    "port), MESHCOMM_BOOTSTRAP_ADDR=127.0.0.1:<another free port> and a random MESHCOMM_BOOTSTRAP_SECRET; "
    "all\n"
    "other environment variables pass through. Output lines are prefixed with \"[rank] \" (stdout to "
    "stdout,\n"
    "stderr to stderr). Each rank runs in its own process group; SIGINT, SIGTERM and SIGHUP are forwarded "
    "to\n"
    "every rank's group. When a rank fails, every group gets SIGTERM, then SIGKILL 3 s later.\n"
    "\n"
    "Exit status: 0 when every rank succeeds; else the first failing rank's exit code (128+N when signal N "
    "killed\n"
    "it); 124 on --timeout; 127 when the command cannot be executed; 2 on bad usage.\n";

struct Options {
  int nRanks = 0;
  double timeoutSec = 0;  // 0: none
  std::vector<std::string> command;
};

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "meshcomm-run: %s\n(meshcomm-run -h for help)\n", message.c_str());
  std::exit(kExitUsage);
}

std::optional<long> parseLong(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || text.empty() || *end != '\0') return std::nullopt;
  return v;
}

// The option's value: "-n 4", "-n4", "--nproc=4", "--nproc 4".
std::string optionValue(int argc, char** argv, int* i, const std::string& arg, const std::string& name) {
  if (arg.size() > name.size()) return arg.substr(name.size() + (arg[name.size()] == '=' ? 1 : 0));
  if (*i + 1 >= argc) usageError(name + " needs a value");
  return argv[++*i];
}

bool isOption(const std::string& arg, const std::string& name) {
  if (arg.rfind(name, 0) != 0) return false;
  // Short options take attached values ("-n4"); long ones need '=' ("--nproc=4").
  return arg.size() == name.size() || name.size() == 2 || arg[name.size()] == '=';
}

Options parseOptions(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (isOption(arg, "-n") || isOption(arg, "--nproc")) {
      std::string v = optionValue(argc, argv, &i, arg, arg.rfind("--", 0) == 0 ? "--nproc" : "-n");
      auto n = parseLong(v);
      if (!n || *n < 1 || *n > 4096) usageError("-n needs a rank count in 1-4096, got '" + v + "'");
      o.nRanks = static_cast<int>(*n);
    } else if (isOption(arg, "--timeout")) {
      std::string v = optionValue(argc, argv, &i, arg, "--timeout");
      char* end = nullptr;
      o.timeoutSec = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.timeoutSec > 0))
        usageError("--timeout needs a positive number of seconds, got '" + v + "'");
    } else if (arg.size() > 1 && arg[0] == '-') {
      usageError("unknown option '" + arg + "'");
    } else {
      break;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.nRanks == 0) usageError("-n N is required");
  if (o.command.empty()) usageError("no command given");
  return o;
}

[[noreturn]] void fatal(const std::string& what, int err) {
  std::fprintf(stderr, "meshcomm-run: %s: %s\n", what.c_str(), std::strerror(err));
  std::exit(1);
}

// ---- launch environment ----------------------------------------------------------------------------------

// Two distinct free loopback ports: both sockets stay bound until both numbers are known.
std::pair<int, int> pickTwoFreePorts() {
  int fds[2];
  int ports[2];
  for (int k = 0; k < 2; ++k) {
    fds[k] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[k] < 0) fatal("socket()", errno);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fds[k], reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) fatal("bind(127.0.0.1:0)", errno);
    if (getsockname(fds[k], reinterpret_cast<sockaddr*>(&a), &len) != 0) fatal("getsockname()", errno);
    ports[k] = ntohs(a.sin_port);
  }
  close(fds[0]);
  close(fds[1]);
  return {ports[0], ports[1]};
}

std::string randomSecretHex() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno != EINTR) fatal("getrandom()", errno);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) {
    static const char* digits = "0123456789abcdef";
    hex += digits[b >> 4];
    hex += digits[b & 0xf];
  }
  return hex;
}

// This process's environment with the launch variables replaced.
std::vector<std::string> rankEnvironment(const std::vector<std::pair<std::string, std::string>>& vars) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
  return env;
}

// ---- output prefixing ------------------------------------------------------------------------------------

void writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone (EPIPE): keep draining the ranks regardless
    done += static_cast<size_t>(n);
  }
}

// One rank's stdout or stderr pipe, forwarded line by line with the rank prefix.
struct OutputStream {
  int fd = -1;  // read end; -1 once closed
  int dest = 1;
  std::string prefix;
  std::string partial;

  void emitLines(bool flushPartial) {
    std::string out;
    size_t start = 0;
    for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += prefix;
      out.append(partial, start, nl - start + 1);
    }
    partial.erase(0, start);
    if (!partial.empty() && (flushPartial || partial.size() >= kMaxLine)) {
      out += prefix + partial + "\n";
      partial.clear();
    }
    writeAll(dest, out);
  }

  // Reads what is available; closes the pipe on EOF or error.
  void drain() {
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n > 0) {
      partial.append(buf, static_cast<size_t>(n));
      emitLines(false);
      return;
    }
    emitLines(true);
    close(fd);
    fd = -1;
  }
};

// ---- the job ---------------------------------------------------------------------------------------------

struct Rank {
  pid_t pid = -1;
  bool running = false;
};

int exitCodeOf(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

class Job {
 public:
  Job(Options options, sigset_t originalMask, int signalFd)
      : options_(std::move(options)),
        originalMask_(originalMask),
        signalFd_(signalFd),
        ranks_(options_.nRanks) {}

  int run();

 private:
  void start();
  pid_t spawn(int rank, const std::vector<std::string>& env);
  void onSignals();
  void reap();
  void signalRanks(int sig);
  // Prints `message` (if any), SIGTERMs every rank's process group (unless a forwarded signal did already)
  // and schedules the SIGKILL.
  void stopAll(const std::string& message);
  int pollTimeoutMs() const;
  bool finished() const;

  Options options_;
  sigset_t originalMask_;
  int signalFd_;
  std::vector<Rank> ranks_;
  std::vector<OutputStream> streams_;
  int nRunning_ = 0;
  std::optional<int> firstFailure_;
  bool timedOut_ = false;
  bool forwardedSignal_ = false;  // the ranks already got the user's SIGINT/SIGTERM/SIGHUP
  std::optional<Clock::time_point> jobDeadline_, killAt_, drainUntil_;
};

pid_t Job::spawn(int rank, const std::vector<std::string>& env) {
  int out[2], err[2], execStatus[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(execStatus, O_CLOEXEC) != 0)
    fatal("pipe2()", errno);
  std::vector<char*> argv, envp;
  for (const auto& a : options_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) fatal("fork()", errno);
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. dup2 clears close-on-exec on the new descriptors.
    if (dup2(out[1], STDOUT_FILENO) < 0 || dup2(err[1], STDERR_FILENO) < 0) _exit(kExitCannotExecute);
    // Its own process group, so that stopping a rank also stops what it started (a shell's children).
    // These three cannot fail for a fresh child and valid arguments.
    (void)setpgid(0, 0);
    (void)signal(SIGPIPE, SIG_DFL);
    (void)sigprocmask(SIG_SETMASK, &originalMask_, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!write(execStatus[1], &e, sizeof(e));
    _exit(kExitCannotExecute);
  }
  close(out[1]);
  close(err[1]);
  close(execStatus[1]);
  int execErr = 0;
  ssize_t n;
  while ((n = read(execStatus[0], &execErr, sizeof(execErr))) < 0 && errno == EINTR) {
  }
  close(execStatus[0]);  // after this the child has exec'd (or failed), so its process group exists
  std::string prefix = "[" + std::to_string(rank) + "] ";
  streams_.push_back({out[0], STDOUT_FILENO, prefix, {}});
  streams_.push_back({err[0], STDERR_FILENO, prefix, {}});
  if (n == static_cast<ssize_t>(sizeof(execErr))) {
    std::fprintf(stderr, "meshcomm-run: cannot execute '%s': %s\n", options_.command[0].c_str(),
                 std::strerror(execErr));
    firstFailure_ = kExitCannotExecute;
  }
  return pid;
}

void Job::start() {
  auto [masterPort, bootstrapPort] = pickTwoFreePorts();
  std::string secret = randomSecretHex();
  for (int r = 0; r < options_.nRanks && !firstFailure_; ++r) {
    std::vector<std::string> env = rankEnvironment({
        {"RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(options_.nRanks)},
        {"LOCAL_RANK", std::to_string(r)},
        {"LOCAL_WORLD_SIZE", std::to_string(options_.nRanks)},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(masterPort)},
        {"MESHCOMM_BOOTSTRAP_ADDR", "127.0.0.1:" + std::to_string(bootstrapPort)},
        {"MESHCOMM_BOOTSTRAP_SECRET", secret},
    });
    ranks_[r].pid = spawn(r, env);
    ranks_[r].running = true;
    ++nRunning_;
  }
  if (firstFailure_) stopAll("");
  if (options_.timeoutSec > 0) {
    jobDeadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.timeoutSec));
  }
}

void Job::signalRanks(int sig) {
  for (const Rank& r : ranks_) {
    // The rank's whole process group, which outlives a rank that exited while its children run on.
    // ESRCH (the group is gone) is harmless.
    if (r.pid > 0) kill(-r.pid, sig);
  }
}

void Job::stopAll(const std::string& message) {
  if (!message.empty()) std::fprintf(stderr, "meshcomm-run: %s\n", message.c_str());
  // After a forwarded signal the ranks are shutting down already: a second signal could cut that short.
  if (!forwardedSignal_) signalRanks(SIGTERM);
  if (!killAt_) killAt_ = Clock::now() + kKillGrace;
}

void Job::reap() {
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // 0: none left to reap now; -1 (ECHILD): none at all
    auto it = std::find_if(ranks_.begin(), ranks_.end(), [&](const Rank& r) { return r.pid == pid; });
    if (it == ranks_.end() || !it->running) continue;
    it->running = false;
    --nRunning_;
    bool failed = WIFSIGNALED(status) || WEXITSTATUS(status) != 0;
    if (failed && !firstFailure_ && !timedOut_) {
      firstFailure_ = exitCodeOf(status);
      stopAll("rank " + std::to_string(it - ranks_.begin()) + " " + describeStatus(status) +
              (nRunning_ > 0 ? "; stopping the other ranks" : ""));
    }
    if (nRunning_ == 0) drainUntil_ = Clock::now() + kDrainGrace;
  }
}

void Job::onSignals() {
  signalfd_siginfo info;
  while (true) {
    ssize_t n = read(signalFd_, &info, sizeof(info));
    if (n != static_cast<ssize_t>(sizeof(info))) return;  // EAGAIN: all read
    if (info.ssi_signo == SIGCHLD) {
      reap();
    } else {
      signalRanks(static_cast<int>(info.ssi_signo));  // SIGINT, SIGTERM, SIGHUP: the ranks decide
      forwardedSignal_ = true;
    }
  }
}

int Job::pollTimeoutMs() const {
  std::optional<Clock::time_point> next;
  for (const auto& t : {jobDeadline_, killAt_, drainUntil_}) {
    if (t && (!next || *t < *next)) next = t;
  }
  if (!next) return -1;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60 * 60 * 1000));
}

bool Job::finished() const {
  if (nRunning_ > 0) return false;
  bool open = std::any_of(streams_.begin(), streams_.end(), [](const OutputStream& s) { return s.fd >= 0; });
  // A rank's background children may hold its pipes open: stop reading after the drain grace.
  return !open || (drainUntil_ && Clock::now() >= *drainUntil_);
}

int Job::run() {
  start();
  while (!finished()) {
    std::vector<pollfd> fds{{signalFd_, POLLIN, 0}};
    for (const auto& s : streams_) fds.push_back({s.fd, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), pollTimeoutMs());
    if (rc < 0 && errno != EINTR) fatal("poll()", errno);
    if (rc > 0) {
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) streams_[i - 1].drain();
      }
      if (fds[0].revents) onSignals();
    }
    auto now = Clock::now();
    if (jobDeadline_ && now >= *jobDeadline_ && !timedOut_ && nRunning_ > 0) {
      timedOut_ = true;
      char message[96];
      std::snprintf(message, sizeof(message), "the job ran longer than --timeout %gs; stopping all ranks",
                    options_.timeoutSec);
      stopAll(message);
    }
    if (killAt_ && now >= *killAt_) {
      signalRanks(SIGKILL);
      killAt_.reset();
    }
  }
  for (auto& s : streams_) {
    if (s.fd >= 0) s.emitLines(true);
  }
  if (timedOut_) return kExitTimeout;
  return firstFailure_.value_or(0);
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parseOptions(argc, argv);

  // Signals arrive through a signalfd; ranks get the original mask and default SIGPIPE back before exec.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
  if (sigprocmask(SIG_BLOCK, &handled, &original) != 0) fatal("sigprocmask()", errno);
  int signalFd = signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signalFd < 0) fatal("signalfd()", errno);
  (void)signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher (writeAll ignores EPIPE)

  return Job(std::move(options), original, signalFd).run();
}
