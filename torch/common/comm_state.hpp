// CommState: what a meshcomm group (a c10d process group or a torchcomms communicator) shares with its work
// objects: the meshcomm Comm (one per group, on the group's CUDA device), the mutex that serialises every use
// of it (c10d calls ops from several threads, e.g. DDP's autograd hooks; a Comm is driven by one thread at a
// time), the event pool and the failure its watchdog recorded. Works hold it through shared_ptr, so a work
// that outlives its group can still be waited on.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "event_pool.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/comm_resources.hpp"

namespace meshcomm::torch_backend {

struct CommState {
  CommState(int rank, int size, at::Device device);

  const int rank;
  const int size;
  const at::Device device;
  std::mutex mutex;
  std::unique_ptr<Comm> comm;  // null after shutdown()
  // After shutdown(): the Comm drained and announced its close to the peers (Comm::beginClose); it is freed
  // with this state, once the peers have announced theirs. torch's destroy_process_group shuts groups down in
  // an order that differs between ranks, so a blocking teardown inside shutdown() could deadlock.
  std::unique_ptr<Comm> closing;
  std::shared_ptr<EventPool> events;

  // Throws c10::DistBackendError with the Comm's first device-side error (a timed-out wait, a dead peer).
  // Skips the check when another thread holds the mutex (it will see the error itself).
  void checkDeviceError();

  // The group's failure, recorded by its watchdog (the first one only): every later op and wait raises it.
  void recordFailure(const std::string& what, bool timedOut);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  bool failureIsTimeout() const;
  std::optional<std::string> failure() const;
  // Throws c10::DistBackendError naming the rank and `op` when a failure was recorded.
  void throwIfFailed(const char* op) const;

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex failureMutex_;
  std::string failure_;
  bool failureTimedOut_ = false;
};

// Collective over the `size` ranks that share `store`: rank 0 creates a meshcomm UniqueId and publishes it
// in the store under `key`, every rank joins the TcpBootstrap and builds its Comm on `device` with
// `resources`. Errors (a store timeout, a bootstrap failure) become c10::DistBackendError naming the rank.
std::unique_ptr<Comm> createComm(const c10::intrusive_ptr<::c10d::Store>& store, const std::string& key,
                                 int rank, int size, const at::Device& device,
                                 const CommResourcesConfig& resources);

[[noreturn]] void rethrowAsDistBackendError(const std::exception& e);

// Runs a call into meshcomm and rethrows its meshcomm::Error as c10::DistBackendError (same text).
template <typename F>
auto translateErrors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    rethrowAsDistBackendError(e);
  }
}

}  // namespace meshcomm::torch_backend
