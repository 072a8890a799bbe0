// Named CTA barriers (PTX bar.sync / bar.arrive with an id and a thread count): synchronise a subset of a
// block's warps, e.g. producer and consumer warps of a warp-specialised kernel. Id 0 is __syncthreads()'s;
// `threads` counts every participating thread (arrivers and syncers), a multiple of 32, and whole warps
// take part. An id must not be reused before its previous phase completed (arrivals of two phases would
// mix).
#pragma once

#include "meshcomm/device/macros.hpp"

#if defined(__CUDACC__)
namespace meshcomm::device {

// Waits until `threads` threads have arrived at barrier `id` (this warp included). Acquire and release at
// CTA scope: memory accesses of the arriving threads before their arrival are performed relative to the
// waiting threads after it returns.
MESHCOMM_DEVICE_INLINE void namedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at barrier `id` without waiting. Release at CTA scope: this warp's earlier memory accesses are
// performed relative to the threads that sync on the same phase of the barrier.
MESHCOMM_DEVICE_INLINE void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace meshcomm::device
#endif
