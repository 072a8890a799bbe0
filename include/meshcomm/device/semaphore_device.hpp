// Device handles of semaphores. A semaphore is a monotonic 64-bit token in the waiter's GPU memory plus
// the waiter's own count of waits (also in GPU memory, so it survives kernel launches and graph replays).
// Tokens are never reset: every rank issues the same sequence of signals and waits per semaphore (the
// epoch invariant of docs/architecture.md). signal/wait on one semaphore are called by one thread at a time.
#pragma once

#include <cstdint>

#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/macros.hpp"

namespace meshcomm {

// Shared waiting half: the inbound token and the count of waits consumed so far.
struct SemaphoreWaitState {
  uint64_t* inbound;          // local token; a peer (GPU or proxy) increments it
  uint64_t* expectedInbound;  // local, waits consumed so far; touched only by the waiting thread

#if defined(__CUDACC__)
  // Acquire: after it returns true, every write the signaller published before its signal is visible.
  MESHCOMM_DEVICE_INLINE bool wait(const SpinContext& ctx, DeviceOp op) {
    const uint64_t expected = *expectedInbound + 1;
    *expectedInbound = expected;
    return device::spinUntil(
        [&](uint64_t& seen) {
          seen = device::loadAcquireSys(inbound);
          return device::reached(seen, expected);
        },
        ctx, op, expected);
  }
  // Relaxed: waits for the count only; orders no data (use after a relaxedSignal, as a pure barrier).
  MESHCOMM_DEVICE_INLINE bool relaxedWait(const SpinContext& ctx, DeviceOp op) {
    const uint64_t expected = *expectedInbound + 1;
    *expectedInbound = expected;
    return device::spinUntil(
        [&](uint64_t& seen) {
          seen = device::loadRelaxedSys(inbound);
          return device::reached(seen, expected);
        },
        ctx, op, expected);
  }
  // Non-blocking acquire: consumes one signal and returns true if one is pending, else returns false.
  MESHCOMM_DEVICE_INLINE bool poll() {
    const uint64_t expected = *expectedInbound + 1;
    if (!device::reached(device::loadAcquireSys(inbound), expected)) return false;
    *expectedInbound = expected;
    return true;
  }
#endif
};

// GPU-to-GPU semaphore over a peer mapping (CUDA IPC): the signaller adds to the waiter's token directly.
struct MemoryDevice2DeviceSemaphoreDeviceHandle {
  SemaphoreWaitState local;  // what this GPU waits on
  uint64_t* remoteInbound;   // the peer's token, mapped into this GPU's address space
  SpinContext spin;

#if defined(__CUDACC__)
  // Release: this thread's earlier writes (and, after __syncthreads(), its block's) are visible to the
  // peer before the peer's matching wait returns.
  MESHCOMM_DEVICE_INLINE void signal() {
    device::redAddReleaseSys(remoteInbound, 1);
  }
  // Relaxed: an execution signal; orders no data.
  MESHCOMM_DEVICE_INLINE void relaxedSignal() {
    device::redAddRelaxedSys(remoteInbound, 1);
  }
  // Acquire wait for the peer's next signal; false on timeout (reported through `spin`).
  MESHCOMM_DEVICE_INLINE bool wait() {
    return local.wait(spin, DeviceOp::SemaphoreWait);
  }
  MESHCOMM_DEVICE_INLINE bool relaxedWait() {
    return local.relaxedWait(spin, DeviceOp::SemaphoreWait);
  }
  MESHCOMM_DEVICE_INLINE bool poll() {
    return local.poll();
  }
#endif
};

// Host-signalled semaphore: a proxy thread increments the token through a connection (copy engine or
// network), after the writes it issued earlier on that connection have landed.
struct Host2DeviceSemaphoreDeviceHandle {
  SemaphoreWaitState local;
  SpinContext spin;

#if defined(__CUDACC__)
  // Acquire wait: data the proxy wrote on this connection before signalling is visible after it returns.
  MESHCOMM_DEVICE_INLINE bool wait() {
    return local.wait(spin, DeviceOp::HostSemaphoreWait);
  }
  MESHCOMM_DEVICE_INLINE bool poll() {
    return local.poll();
  }
#endif
};

}  // namespace meshcomm
