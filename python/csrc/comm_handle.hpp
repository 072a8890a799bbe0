// CommHandle: the Python Comm. Owns the C++ Comm until close() (or destruction), which is collective and
// runs with the GIL released. Every call takes the handle's mutex after releasing the GIL, so a Comm used
// from two Python threads serialises instead of racing, and close() waits for a call in flight.
#pragma once

#include <memory>
#include <mutex>
#include <utility>

#include "bindings.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::python {

class CommHandle {
 public:
  explicit CommHandle(std::unique_ptr<Comm> comm) : comm_(std::move(comm)) {}
  // Called from Python's deallocation with the GIL held.
  ~CommHandle() {
    nb::gil_scoped_release release;
    close();
  }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;

  // Runs f(Comm&) without the GIL, holding the mutex. Throws InvalidUsage after close().
  template <typename F>
  auto run(F&& f) {
    nb::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    MESHCOMM_REQUIRE(comm_ != nullptr, "Comm: used after close()");
    return f(*comm_);
  }

  // Collective teardown (drain, bootstrap barrier, unmap, free); call without the GIL. Idempotent.
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_.reset();
  }
  bool closed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return comm_ == nullptr;
  }

 private:
  std::mutex mutex_;
  std::unique_ptr<Comm> comm_;
};

}  // namespace meshcomm::python
