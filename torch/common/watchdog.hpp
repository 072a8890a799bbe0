// Watchdog: the background thread of a meshcomm group (ProcessGroupNCCL's watchdog, docs/torch.md
// "Watchdog"; torchcomms' timeout watchdog, docs/torchcomms.md). Every interval it checks the group's Comm
// for a device-side error (a device wait that timed out: a peer missing an op, a count mismatch) and the
// deadlines of the group's in-flight works that have an end event (outside CUDA-graph capture), telling each
// tracked work how it ended. The first failure is recorded in the CommState — every later op and wait() of
// the group raises it — and then handled as the mode says (ProcessGroupNCCL's TORCH_NCCL_ASYNC_ERROR_HANDLING
// values; c10d groups read MESHCOMM_TORCH_ASYNC_ERROR_HANDLING, torchcomms communicators map their
// abort_process_on_timeout_or_error option to 3 or 2):
//   0 no handling:   record and log only;
//   1 tear down:     abort the Comm (its device waits give up), then terminate the process;
//   2 clean up only: abort the Comm; the program sees DistBackendError at its next op or wait;
//   3 skip clean up: terminate the process at once (the default, as torch's for NCCL).
// Ops without an end event (c10d's blocking ops, for host overhead) are covered by the device spin timeout
// (MESHCOMM_DEVICE_TIMEOUT_MS), which the watchdog sees as a device error.
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm_state.hpp"
#include "work_end.hpp"

namespace meshcomm::torch_backend {

enum class AsyncErrorHandling : int { NoHandling = 0, TearDown = 1, CleanUpOnly = 2, SkipCleanUp = 3 };

// MESHCOMM_TORCH_ASYNC_ERROR_HANDLING (throws naming the variable for a value outside 0..3).
AsyncErrorHandling asyncErrorHandlingFromEnv();
const char* asyncErrorHandlingName(AsyncErrorHandling mode);

class Watchdog {
 public:
  // Watches `comm` (owned by `state`, which outlives this watchdog: the backend stops it before its Comm
  // closes). An interval of 0 starts no thread (MESHCOMM_TORCH_WATCHDOG_INTERVAL_MS=0). `beforeTerminate`
  // (may be empty) runs on the watchdog thread right before a mode that ends the process does so
  // (torchcomms' abort hooks).
  // `modeSource` says where the mode came from, for the failure's stderr line (e.g.
  // "MESHCOMM_TORCH_ASYNC_ERROR_HANDLING=3").
  Watchdog(std::shared_ptr<CommState> state, Comm& comm, AsyncErrorHandling mode, std::string modeSource,
           std::chrono::milliseconds interval, std::function<void()> beforeTerminate = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Callback of a tracked work: how it ended. Runs on the watchdog thread, without the watchdog's lock.
  using OnDone = std::function<void(WorkOutcome)>;
  // Watches a work whose end event is recorded (not in a capture) until it completes or `timeout` passes; a
  // timeout of 0 only watches for completion. `onDone` (may be empty) learns the outcome: Completed; or, when
  // the group fails, TimedOut for the work that timed out and Failed for every other tracked work.
  void track(std::shared_ptr<WorkEnd> end, const WorkSpec& spec, OnDone onDone = {});
  // Stops and joins the thread (idempotent; never from the watchdog thread itself).
  void stop();

  AsyncErrorHandling mode() const { return mode_; }

 private:
  struct Tracked {
    std::shared_ptr<WorkEnd> end;
    WorkSpec spec;
    std::chrono::steady_clock::time_point deadline;  // max(): no deadline
    OnDone onDone;
  };

  struct Failure {
    std::string what;  // "" if none
    bool timedOut;
    size_t timedOutIndex = SIZE_MAX;  // the tracked work that timed out, if one did
  };

  void run();
  // The first failure found in one pass: the device error report, then the tracked works' deadlines.
  // Completed works leave the list (their callbacks are collected into `completed`).
  Failure findFailure(std::vector<OnDone>& completed);
  void handle(const Failure& failure);

  std::shared_ptr<CommState> state_;
  Comm& comm_;
  const AsyncErrorHandling mode_;
  const std::string modeSource_;
  const std::chrono::milliseconds interval_;
  const std::function<void()> beforeTerminate_;
  std::mutex mutex_;  // tracked_, stop_
  std::condition_variable wake_;
  std::vector<Tracked> tracked_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshcomm::torch_backend
