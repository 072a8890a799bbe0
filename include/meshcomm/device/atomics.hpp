// Scoped loads, stores and reductions on 64-bit words in global (device, peer-mapped or host-mapped)
// memory. Each function's comment states its memory-order contract in PTX memory-model terms.
#pragma once

#include <cstdint>

#include "meshcomm/device/macros.hpp"

#if defined(__CUDACC__)
namespace meshcomm::device {

// Acquire at system scope: no later access of this thread moves before it; pairs with a release by any agent.
MESHCOMM_DEVICE_INLINE uint64_t loadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Relaxed at system scope: coherent, but orders nothing around it.
MESHCOMM_DEVICE_INLINE uint64_t loadRelaxedSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Release at system scope: every earlier access of this thread is visible to whoever acquires this value.
MESHCOMM_DEVICE_INLINE void storeReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Relaxed at system scope: coherent, orders nothing.
MESHCOMM_DEVICE_INLINE void storeRelaxedSys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Acquire-release fence at system scope: this thread's earlier accesses are ordered before its later ones for
// every agent; a later relaxed store then releases all of them (the fence-then-store release pattern).
MESHCOMM_DEVICE_INLINE void fenceAcqRelSys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// Release-add at system scope: earlier accesses of this thread happen-before an acquire that observes the
// sum.
MESHCOMM_DEVICE_INLINE void redAddReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Relaxed add at system scope: an execution signal only; it orders no data.
MESHCOMM_DEVICE_INLINE void redAddRelaxedSys(uint64_t* p, uint64_t v) {
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Relaxed fetch-add at device (GPU) scope: atomic counter; orders nothing.
MESHCOMM_DEVICE_INLINE uint64_t fetchAddRelaxedGpu(uint64_t* p, uint64_t v) {
  uint64_t old;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}

// Acquire at device (GPU) scope: pairs with a release at gpu or wider scope by a thread of this GPU.
MESHCOMM_DEVICE_INLINE uint64_t loadAcquireGpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Relaxed at device (GPU) scope: coherent among this GPU's threads, orders nothing.
MESHCOMM_DEVICE_INLINE uint64_t loadRelaxedGpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Release-max at device (GPU) scope: earlier accesses of this thread (and, by cumulativity, writes it has
// acquired) happen-before a gpu-scope acquire that observes the maximum.
MESHCOMM_DEVICE_INLINE void redMaxReleaseGpu(uint64_t* p, uint64_t v) {
  asm volatile("red.release.gpu.global.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Relaxed compare-and-swap at device (GPU) scope; returns the old value. Orders nothing.
MESHCOMM_DEVICE_INLINE uint64_t casRelaxedGpu(uint64_t* p, uint64_t expected, uint64_t desired) {
  uint64_t old;
  asm volatile("atom.relaxed.gpu.global.cas.b64 %0, [%1], %2, %3;"
               : "=l"(old)
               : "l"(p), "l"(expected), "l"(desired)
               : "memory");
  return old;
}

// Wrap-safe "a has reached b" for monotonic 64-bit counters.
MESHCOMM_DEVICE_INLINE bool reached(uint64_t a, uint64_t b) {
  return static_cast<int64_t>(a - b) >= 0;
}

// Nanoseconds from the GPU's global timer (comparable across SMs of one GPU).
MESHCOMM_DEVICE_INLINE uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace meshcomm::device
#endif
