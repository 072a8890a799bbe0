// Cooperative copies through registers, 16 bytes per thread per access. Used for local, peer-mapped
// (NVLink) and host-mapped memory alike. Plain (weak) stores: a copy publishes nothing by itself; make it
// visible with __syncthreads() among the copying threads followed by one semaphore signal.
#pragma once

#include <cstdint>

#include "meshcomm/device/macros.hpp"

#if defined(__CUDACC__)
namespace meshcomm::device {

// Copies `bytes` from `src` to `dst`; thread `tid` of `nThreads` takes every nThreads-th 16-byte vector,
// keeping `Unroll` independent loads in flight before the first store. Any alignment and size: the vector
// path runs when both pointers share 16-byte alignment, otherwise 4-byte or 1-byte accesses.
template <int Unroll = 4>
MESHCOMM_DEVICE_INLINE void copy(void* dst, const void* src, uint64_t bytes, uint32_t tid,
                                 uint32_t nThreads) {
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s);
  uint64_t done = 0;
  if ((misalign & 15) == 0) {
    const uint64_t nVec = bytes / 16;
    auto* dv = reinterpret_cast<uint4*>(d);
    auto* sv = reinterpret_cast<const uint4*>(s);
    const uint64_t stride = static_cast<uint64_t>(Unroll) * nThreads;
    for (uint64_t base = tid; base < nVec; base += stride) {
      uint4 r[Unroll];
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        uint64_t i = base + static_cast<uint64_t>(u) * nThreads;
        if (i < nVec) r[u] = sv[i];
      }
#pragma unroll
      for (int u = 0; u < Unroll; ++u) {
        uint64_t i = base + static_cast<uint64_t>(u) * nThreads;
        if (i < nVec) dv[i] = r[u];
      }
    }
    done = nVec * 16;
  } else if ((misalign & 3) == 0) {
    const uint64_t nWords = bytes / 4;
    auto* dw = reinterpret_cast<uint32_t*>(d);
    auto* sw = reinterpret_cast<const uint32_t*>(s);
    for (uint64_t i = tid; i < nWords; i += nThreads) dw[i] = sw[i];
    done = nWords * 4;
  }
  for (uint64_t i = done + tid; i < bytes; i += nThreads) d[i] = s[i];
}

}  // namespace meshcomm::device
#endif
