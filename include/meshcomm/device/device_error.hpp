// Device-side spin-wait timeouts. Every device spin goes through spinUntil(): it polls, checks the
// communicator's abort flag and the deadline every kSpinCheckInterval polls, and on timeout records
// (rank, peer, operation) in host-mapped memory, sets the abort flag so every other wait of the process
// gives up at once, and returns false. The host turns the record into an Error (Communicator::
// checkDeviceError()). Timeouts are on in Release builds; MESHCOMM_DEVICE_TIMEOUT_MS=0 disables them.
#pragma once

#include <cstdint>

#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/macros.hpp"

namespace meshcomm {

enum class DeviceOp : uint32_t {
  None = 0,
  SemaphoreWait = 1,      // MemoryChannel / D2D semaphore wait
  HostSemaphoreWait = 2,  // PortChannel wait (signalled by a proxy)
  PacketRead = 3,         // LL packet flag spin
  FifoPush = 4,           // PortChannel trigger push waiting for FIFO space
  FifoFlush = 5,          // PortChannel flush waiting for the proxy
  CountMismatch = 6,      // a receiver's expected byte count differs from what the sender sent (not a wait)
  SendCountMismatch = 7,  // a sender's byte count differs from what the receiver expects (not a wait)
  EpOverflow = 8,       // an expert-parallel receive does not fit the buffer (expected: rows, observed: room)
  EpBadExpert = 9,      // an expert index outside [-1, experts) (expected: experts, observed: the index)
  EpDispatchWait = 10,  // a low-latency dispatch waiting for a peer's counts or credit
  EpCombineWait = 11,   // a low-latency combine waiting for a peer's rows or credit
  EpStagingOverflow = 12,  // staged rows for other nodes do not fit (expected: rows, observed: room)
};

// Lives in host-mapped pinned memory, one per Communicator. Written by the first device wait that fails.
struct DeviceErrorReport {
  uint32_t aborted;   // 0 until a wait fails; then 1 and every spin exits
  uint32_t op;        // DeviceOp of the first failure
  int32_t rank;       // rank that timed out
  int32_t peer;       // peer it was waiting for (-1: none)
  uint64_t expected;  // value waited for
  uint64_t observed;  // value last seen
  uint64_t waitedNs;  // how long it waited
};

// Embedded in every device handle that can spin.
struct SpinContext {
  DeviceErrorReport* report;  // device pointer of the host-mapped report (may be null: no reporting)
  uint64_t timeoutNs;         // 0 = no timeout
  int32_t rank;
  int32_t peer;
};

#if defined(__CUDACC__)
namespace device {

constexpr uint32_t kSpinCheckInterval = 1024;

// Records the first failure of the process and raises the abort flag (release, system scope).
MESHCOMM_DEVICE_INLINE void reportTimeout(const SpinContext& ctx, DeviceOp op, uint64_t expected,
                                          uint64_t observed, uint64_t waitedNs) {
  DeviceErrorReport* r = ctx.report;
  if (r == nullptr) return;
  if (atomicCAS(reinterpret_cast<unsigned int*>(&r->op), 0u, static_cast<unsigned int>(op)) == 0u) {
    r->rank = ctx.rank;
    r->peer = ctx.peer;
    r->expected = expected;
    r->observed = observed;
    r->waitedNs = waitedNs;
    __threadfence_system();
  }
  atomicExch(reinterpret_cast<unsigned int*>(&r->aborted), 1u);
  __threadfence_system();
}

MESHCOMM_DEVICE_INLINE bool aborted(const SpinContext& ctx) {
  return ctx.report != nullptr && *reinterpret_cast<volatile uint32_t*>(&ctx.report->aborted) != 0;
}

// Spins until `poll(observed)` returns true. `poll` stores the value it saw in `observed` for the report.
// Returns true on success, false on timeout or when another wait of the process already failed.
template <typename Poll>
MESHCOMM_DEVICE_INLINE bool spinUntil(Poll&& poll, const SpinContext& ctx, DeviceOp op, uint64_t expected) {
  uint64_t observed = 0;
  if (poll(observed)) return true;
  const uint64_t start = globalTimerNs();
  for (uint32_t n = 1;; ++n) {
    if (poll(observed)) return true;
    if (n % kSpinCheckInterval == 0) {
      if (aborted(ctx)) return false;
      uint64_t waited = globalTimerNs() - start;
      if (ctx.timeoutNs != 0 && waited > ctx.timeoutNs) {
        reportTimeout(ctx, op, expected, observed, waited);
        return false;
      }
    }
  }
}

}  // namespace device
#endif
}  // namespace meshcomm
