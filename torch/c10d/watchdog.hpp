// Watchdog: the background thread of a meshcomm process group (ProcessGroupNCCL's watchdog, docs/torch.md
// "Watchdog"). Every interval it checks the group's Comm for a device-side error (a device wait that timed
// out: a peer missing an op, a count mismatch) and the deadlines of the group's in-flight works that have an
// end event (async ops and coalesced blocks, outside CUDA-graph capture). The first failure is recorded in
// the CommState — every later op and wait() of the group raises it — and then handled as
// MESHCOMM_TORCH_ASYNC_ERROR_HANDLING says (ProcessGroupNCCL's TORCH_NCCL_ASYNC_ERROR_HANDLING values):
//   0 no handling:   record and log only;
//   1 tear down:     abort the Comm (its device waits give up), then terminate the process;
//   2 clean up only: abort the Comm; the program sees DistBackendError at its next op or wait;
//   3 skip clean up: terminate the process at once (the default, as torch's for NCCL).
// Blocking ops (async_op=False) record no end event (host overhead); their kernels are covered by the device
// spin timeout (MESHCOMM_DEVICE_TIMEOUT_MS), which the watchdog sees as a device error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm_state.hpp"
#include "work.hpp"

namespace meshcomm::torch_backend {

enum class AsyncErrorHandling : int { NoHandling = 0, TearDown = 1, CleanUpOnly = 2, SkipCleanUp = 3 };

// MESHCOMM_TORCH_ASYNC_ERROR_HANDLING (throws naming the variable for a value outside 0..3).
AsyncErrorHandling asyncErrorHandlingFromEnv();
const char* asyncErrorHandlingName(AsyncErrorHandling mode);

class Watchdog {
 public:
  // Watches `comm` (owned by `state`, which outlives this watchdog: the backend stops it before its Comm
  // closes). An interval of 0 starts no thread (MESHCOMM_TORCH_WATCHDOG_INTERVAL_MS=0).
  Watchdog(std::shared_ptr<CommState> state, Comm& comm, AsyncErrorHandling mode,
           std::chrono::milliseconds interval);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches a work whose end event is recorded (not in a capture) until it completes or `timeout` passes.
  void track(std::shared_ptr<WorkEnd> end, const WorkSpec& spec);
  // Stops and joins the thread (idempotent; never from the watchdog thread itself).
  void stop();

  AsyncErrorHandling mode() const { return mode_; }

 private:
  struct Tracked {
    std::shared_ptr<WorkEnd> end;
    WorkSpec spec;
    std::chrono::steady_clock::time_point deadline;
  };

  struct Failure {
    std::string what;  // "" if none
    bool timedOut;
  };

  void run();
  // The first failure found in one pass: the device error report, then the tracked works' deadlines.
  Failure findFailure();
  void handle(const Failure& failure);

  std::shared_ptr<CommState> state_;
  Comm& comm_;
  const AsyncErrorHandling mode_;
  const std::chrono::milliseconds interval_;
  std::mutex mutex_;  // tracked_, stop_
  std::condition_variable wake_;
  std::vector<Tracked> tracked_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshcomm::torch_backend
