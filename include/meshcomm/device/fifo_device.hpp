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

// A counter the proxy advances in host-mapped memory, as the GPU's waiters see it. Each waiter polls the
// GPU-local mirror; at most one read of the host word per kHostPollIntervalNs per GPU is claimed (CAS on the
// stamp), however many blocks wait: their reads would otherwise fill the GPU's PCIe read path, which also
// fetches the proxy's copy and signal commands, so every waiter would slow what it waits for.
struct HostCounterMirror {
  static constexpr uint64_t kHostPollIntervalNs = 1000;
  static constexpr unsigned kMirrorPollPauseNs = 100;

  uint64_t* host;    // host-mapped: written by the proxy with release stores, monotonic
  uint64_t* mirror;  // device memory: the largest value a waiter of this GPU has read from `host`
  uint64_t* stamp;   // device memory: globaltimer of the last claimed read of `host`

#if defined(__CUDACC__)
  // Acquire: the returned value, and the proxy's writes released before it, are visible to this thread. The
  // claimant acquires the host word at system scope and publishes it with a gpu-scope release-max; the others
  // acquire the mirror, so the proxy's release reaches them through the claimant (cumulativity). Pauses
  // kMirrorPollPauseNs when it did not read the host word.
  MESHCOMM_DEVICE_INLINE uint64_t poll() {
    const uint64_t seen = device::loadAcquireGpu(mirror);
    const uint64_t now = device::globalTimerNs();
    const uint64_t last = device::loadRelaxedGpu(stamp);
    if (now - last >= kHostPollIntervalNs && device::casRelaxedGpu(stamp, last, now) == last) {
      const uint64_t fresh = device::loadAcquireSys(host);
      device::redMaxReleaseGpu(mirror, fresh);
      return fresh > seen ? fresh : seen;
    }
    __nanosleep(kMirrorPollPauseNs);
    return seen;
  }
  // The mirror alone (no host read): a lower bound of the host word.
  MESHCOMM_DEVICE_INLINE uint64_t known() const {
    return device::loadAcquireGpu(mirror);
  }
#endif
};

struct FifoDeviceHandle {
  ProxyTrigger* triggers;     // host-mapped ring
  uint64_t* head;             // device memory: next position to claim
  HostCounterMirror tail;     // positions < tail have been consumed by the proxy
  HostCounterMirror flushed;  // positions < flushed have completed (advanced by the proxy on flush)
  uint64_t size;              // power of two
  SpinContext spin;

#if defined(__CUDACC__)
  // Pushes one trigger; returns its position, or ~0 if waiting for space timed out.
  // Release: this thread's earlier writes are visible to the proxy (and the copy it starts) when it sees
  // the trigger. Other threads' writes must be ordered before it with __syncthreads() first.
  MESHCOMM_DEVICE_INLINE uint64_t push(uint64_t type, uint64_t channel, uint64_t srcMemory,
                                       uint64_t dstMemory, uint64_t srcOffset, uint64_t dstOffset,
                                       uint64_t bytes) {
    const uint64_t pos = device::fetchAddRelaxedGpu(head, 1);
    if (!device::reached(tail.known() + size, pos + 1)) {
      const bool ok = device::spinUntil(
          [&](uint64_t& seen) {
            seen = tail.poll();
            return device::reached(seen + size, pos + 1);
          },
          spin, DeviceOp::FifoPush, pos + 1 - size);
      if (!ok) return ~0ull;
    }
    ProxyTrigger* slot = triggers + (pos & (size - 1));
    asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(slot), "l"(srcOffset), "l"(dstOffset)
                 : "memory");
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(&slot->bytes), "l"(bytes) : "memory");
    device::storeReleaseSys(&slot->meta, ProxyTrigger::encodeMeta(type, channel, srcMemory, dstMemory,
                                                                  ProxyTrigger::parityAt(pos, size)));
    return pos;
  }

  // Acquire: waits until the proxy has completed everything up to and including `position`.
  MESHCOMM_DEVICE_INLINE bool waitFlushed(uint64_t position) {
    if (device::reached(flushed.known(), position + 1)) return true;
    return device::spinUntil(
        [&](uint64_t& seen) {
          seen = flushed.poll();
          return device::reached(seen, position + 1);
        },
        spin, DeviceOp::FifoFlush, position + 1);
  }
#endif
};

}  // namespace meshcomm
