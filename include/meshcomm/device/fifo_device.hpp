// The GPU -> host-proxy FIFO. A ring of 32-byte triggers in host-mapped pinned memory. The GPU claims a
// position with an atomic on a device-memory head, waits for space against the proxy's tail, writes the
// three payload words, then publishes the meta word (with the lap-parity bit) by a system-scope release.
// The proxy acquires the meta word, checks the parity for its lap, reads the payload, acts, and advances
// the tail. Parity instead of clearing slots means a stale slot from the previous lap never looks ready.
#pragma once

#include <cstdint>

#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/macros.hpp"

namespace meshcomm {

enum TriggerType : uint64_t { kTriggerData = 1, kTriggerSignal = 2, kTriggerFlush = 4 };

// Field widths of ProxyTrigger::meta. The host checks ids against them when it creates channels.
struct TriggerLayout {
  static constexpr int kTypeBits = 3, kChannelBits = 21, kMemoryBits = 19;
  static constexpr int kTypeShift = 0, kChannelShift = 3, kSrcMemoryShift = 24, kDstMemoryShift = 43,
                       kParityShift = 63;
  static constexpr uint64_t kMaxChannels = 1ull << kChannelBits;
  static constexpr uint64_t kMaxMemories = 1ull << kMemoryBits;
};

struct alignas(32) ProxyTrigger {
  uint64_t srcOffset;
  uint64_t dstOffset;
  uint64_t bytes;
  uint64_t meta;  // type | channel | srcMemory | dstMemory | parity (see TriggerLayout)

  MESHCOMM_HOST_DEVICE_INLINE static uint64_t encodeMeta(uint64_t type, uint64_t channel, uint64_t srcMemory,
                                                         uint64_t dstMemory, uint64_t parity) {
    return (type << TriggerLayout::kTypeShift) | (channel << TriggerLayout::kChannelShift) |
           (srcMemory << TriggerLayout::kSrcMemoryShift) | (dstMemory << TriggerLayout::kDstMemoryShift) |
           (parity << TriggerLayout::kParityShift);
  }
  MESHCOMM_HOST_DEVICE_INLINE static uint64_t field(uint64_t meta, int shift, int bits) {
    return (meta >> shift) & ((1ull << bits) - 1);
  }
  // Parity a trigger written at `position` carries in a ring of `size` slots: 1 on lap 0, 0 on lap 1, ...
  MESHCOMM_HOST_DEVICE_INLINE static uint64_t parityAt(uint64_t position, uint64_t size) {
    return ((position / size) & 1) ^ 1;
  }
};

struct FifoDeviceHandle {
  static constexpr unsigned kFlushPollPauseNs = 500;  // between two reads of `flushed`

  ProxyTrigger* triggers;  // host-mapped ring
  uint64_t* head;          // device memory: next position to claim
  uint64_t* tailCache;     // device memory: last tail seen (a lower bound of the proxy's tail)
  uint64_t* tail;          // host-mapped: positions < tail have been consumed by the proxy
  uint64_t* flushed;       // host-mapped: positions < flushed have completed (written by the proxy on flush)
  uint64_t size;           // power of two
  SpinContext spin;

#if defined(__CUDACC__)
  // Pushes one trigger; returns its position, or ~0 if waiting for space timed out.
  // Release: this thread's earlier writes are visible to the proxy (and the copy it starts) when it sees
  // the trigger. Other threads' writes must be ordered before it with __syncthreads() first.
  MESHCOMM_DEVICE_INLINE uint64_t push(uint64_t type, uint64_t channel, uint64_t srcMemory,
                                       uint64_t dstMemory, uint64_t srcOffset, uint64_t dstOffset,
                                       uint64_t bytes) {
    const uint64_t pos = device::fetchAddRelaxedGpu(head, 1);
    if (!device::reached(*reinterpret_cast<volatile uint64_t*>(tailCache) + size, pos + 1)) {
      bool ok = device::spinUntil(
          [&](uint64_t& seen) {
            seen = device::loadAcquireSys(tail);
            return device::reached(seen + size, pos + 1);
          },
          spin, DeviceOp::FifoPush, pos + 1 - size);
      if (!ok) return ~0ull;
      atomicMax(reinterpret_cast<unsigned long long*>(tailCache),
                static_cast<unsigned long long>(device::loadRelaxedSys(tail)));
    }
    ProxyTrigger* slot = triggers + (pos & (size - 1));
    asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(slot), "l"(srcOffset), "l"(dstOffset)
                 : "memory");
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(&slot->bytes), "l"(bytes) : "memory");
    device::storeReleaseSys(&slot->meta, ProxyTrigger::encodeMeta(type, channel, srcMemory, dstMemory,
                                                                  ProxyTrigger::parityAt(pos, size)));
    return pos;
  }

  // Acquire: waits until the proxy has completed everything up to and including `position`. The word lies in
  // host memory: a pause between reads keeps many waiting blocks from filling the link with reads while the
  // proxy's copies need it.
  MESHCOMM_DEVICE_INLINE bool waitFlushed(uint64_t position) {
    return device::spinUntil(
        [&](uint64_t& seen) {
          seen = device::loadAcquireSys(flushed);
          if (device::reached(seen, position + 1)) return true;
          __nanosleep(kFlushPollPauseNs);
          return false;
        },
        spin, DeviceOp::FifoFlush, position + 1);
  }
#endif
};

}  // namespace meshcomm
