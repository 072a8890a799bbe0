// Device event traces (docs/trace.md): a kernel records timestamped events (its call, block, event code and
// an argument) into a device buffer that the host writes to a file once the device is synchronized. Off
// (events == nullptr) unless MESHCOMM_TRACE is set; a kernel given an off trace pays one uniform branch per
// record.
#pragma once

#include <cstdint>

#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/macros.hpp"

namespace meshcomm {

// One event: two 64-bit words.
//   word 0: the GPU's global timer in ns (comparable across the SMs of one GPU)
//   word 1: call (bits 32-63) | block (bits 16-31) | event (bits 8-15) | arg (bits 0-7)
struct DeviceTrace {
  uint64_t* events = nullptr;            // [capacity][2]; null: tracing is off
  unsigned long long* cursor = nullptr;  // events claimed so far (may pass capacity: the rest are dropped)
  uint32_t capacity = 0;

  MESHCOMM_HOST_DEVICE_INLINE static uint64_t pack(uint32_t call, uint32_t block, uint32_t event,
                                                   uint32_t arg) {
    return static_cast<uint64_t>(call) << 32 | static_cast<uint64_t>(block & 0xffffu) << 16 |
           static_cast<uint64_t>(event & 0xffu) << 8 | (arg & 0xffu);
  }

#if defined(__CUDACC__)
  // Memory order: a relaxed device-scope atomic claims the slot and plain stores fill it; nothing is ordered
  // with the kernel's other accesses (the events are read by the host after the device is synchronized).
  // Called by one thread of a block per event.
  MESHCOMM_DEVICE_INLINE void record(uint32_t call, uint32_t event, uint32_t arg) const {
    if (events == nullptr) return;
    const unsigned long long slot = atomicAdd(cursor, 1ull);
    if (slot >= capacity) return;
    events[2 * slot] = device::globalTimerNs();
    events[2 * slot + 1] = pack(call, blockIdx.x, event, arg);
  }
#endif
};

}  // namespace meshcomm
