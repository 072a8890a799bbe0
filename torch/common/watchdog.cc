// Watchdog (see watchdog.hpp).
#include "watchdog.hpp"

#include <c10/util/Exception.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::torch_backend {

AsyncErrorHandling asyncErrorHandlingFromEnv() {
  const int64_t v = translateErrors([] { return envInt("MESHCOMM_TORCH_ASYNC_ERROR_HANDLING"); });
  TORCH_CHECK(v >= 0 && v <= 3, "meshcomm: MESHCOMM_TORCH_ASYNC_ERROR_HANDLING=", v,
              " is not one of 0 (no handling), 1 (tear down), 2 (clean up only), 3 (skip clean up)");
  return static_cast<AsyncErrorHandling>(v);
}

const char* asyncErrorHandlingName(AsyncErrorHandling mode) {
  switch (mode) {
    case AsyncErrorHandling::NoHandling:
      return "no handling";
    case AsyncErrorHandling::TearDown:
      return "tear down";
    case AsyncErrorHandling::CleanUpOnly:
      return "clean up only";
    case AsyncErrorHandling::SkipCleanUp:
      return "skip clean up";
  }
  return "?";
}

Watchdog::Watchdog(std::shared_ptr<CommState> state, Comm& comm, AsyncErrorHandling mode,
                   std::string modeSource, std::chrono::milliseconds interval,
                   std::function<void()> beforeTerminate)
    : state_(std::move(state)),
      comm_(comm),
      mode_(mode),
      modeSource_(std::move(modeSource)),
      interval_(interval),
      beforeTerminate_(std::move(beforeTerminate)) {
  if (interval_.count() > 0) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  stop();
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    tracked_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::track(std::shared_ptr<WorkEnd> end, const WorkSpec& spec, OnDone onDone) {
  if (!thread_.joinable() || end->event == nullptr || end->captured) return;
  if (spec.timeout.count() <= 0 && !onDone) return;  // nothing to watch for
  const auto deadline = spec.timeout.count() > 0 ? std::chrono::steady_clock::now() + spec.timeout
                                                 : std::chrono::steady_clock::time_point::max();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!stop_) tracked_.push_back(Tracked{std::move(end), spec, deadline, std::move(onDone)});
}

void Watchdog::run() {
  if (cudaSetDevice(state_->device.index()) != cudaSuccess) {  // for cudaEventQuery
    std::fprintf(stderr, "meshcomm: rank %d: watchdog: cannot select CUDA device %d; not watching\n",
                 state_->rank, static_cast<int>(state_->device.index()));
    return;
  }
  // While another thread captures a CUDA graph in global mode (torch.cuda.graph's default), the event
  // queries of a thread in global mode are prohibited and invalidate that capture. The events queried here
  // were recorded outside any capture, so querying them is safe: this thread opts out (relaxed mode).
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (wake_.wait_for(lock, interval_, [&] { return stop_; })) break;
    lock.unlock();
    std::vector<OnDone> completed;
    const Failure failure = findFailure(completed);
    for (OnDone& done : completed) done(WorkOutcome::Completed);
    completed.clear();
    if (!failure.what.empty()) {
      handle(failure);
      return;  // the group is failed: nothing more to watch
    }
    lock.lock();
  }
}

Watchdog::Failure Watchdog::findFailure(std::vector<OnDone>& completed) {
  try {
    comm_.checkError();  // reads the host-mapped device error report: safe beside the owner thread
  } catch (const Error& e) {
    return {e.what(), e.code() == ErrorCode::Timeout};
  } catch (const std::exception& e) {
    return {e.what(), false};
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < tracked_.size();) {
    const Tracked& t = tracked_[i];
    const cudaError_t err = queryEvent(t.end->event.get());
    if (err == cudaSuccess) {
      if (tracked_[i].onDone) completed.push_back(std::move(tracked_[i].onDone));
      tracked_[i] = std::move(tracked_.back());
      tracked_.pop_back();
      continue;
    }
    if (err != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return {c10::str("rank ", state_->rank, ": ", t.spec.name, " #", t.spec.seq,
                       ": cudaEventQuery: ", cudaGetErrorString(err)),
              false};
    }
    if (now > t.deadline) {
      return {c10::str("timeout: rank ", state_->rank, ": ", t.spec.name, " #", t.spec.seq,
                       " did not complete within its timeout of ", t.spec.timeout.count(),
                       " ms (a peer may be missing this op)"),
              true, i};
    }
    ++i;
  }
  return {};
}

void Watchdog::handle(const Failure& failure) {
  state_->recordFailure(failure.what, failure.timedOut);
  std::vector<std::pair<OnDone, WorkOutcome>> outcomes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < tracked_.size(); ++i) {
      if (!tracked_[i].onDone) continue;
      outcomes.emplace_back(std::move(tracked_[i].onDone),
                            i == failure.timedOutIndex ? WorkOutcome::TimedOut : WorkOutcome::Failed);
    }
    tracked_.clear();
  }
  for (auto& [done, outcome] : outcomes) done(outcome);
  const char* consequence = "";
  switch (mode_) {
    case AsyncErrorHandling::NoHandling:
      consequence = "not handled; the group's next op or wait raises it";
      break;
    case AsyncErrorHandling::CleanUpOnly:
      consequence = "aborting the group's Comm; its next op or wait raises DistBackendError";
      break;
    case AsyncErrorHandling::TearDown:
      consequence = failure.timedOut
                        ? "aborting the group's Comm, then Aborting process due to timeout (no rank goes on "
                          "with inconsistent data)"
                        : "aborting the group's Comm, then Aborting process due to error (no rank goes on "
                          "with inconsistent data)";
      break;
    case AsyncErrorHandling::SkipCleanUp:
      consequence = failure.timedOut
                        ? "Aborting process due to timeout (no rank goes on with inconsistent data)"
                        : "Aborting process due to error (no rank goes on with inconsistent data)";
      break;
  }
  std::fprintf(stderr, "meshcomm: rank %d: watchdog: %s; %s (%s): %s\n", state_->rank, failure.what.c_str(),
               modeSource_.c_str(), asyncErrorHandlingName(mode_), consequence);
  std::fflush(stderr);
  if (mode_ == AsyncErrorHandling::CleanUpOnly || mode_ == AsyncErrorHandling::TearDown) comm_.abort();
  if (mode_ == AsyncErrorHandling::TearDown || mode_ == AsyncErrorHandling::SkipCleanUp) {
    if (beforeTerminate_) beforeTerminate_();
    std::abort();
  }
}

}  // namespace meshcomm::torch_backend
