// The call epochs of the EP kernels: a device counter (never reset) that every block of a launch reads, and
// that block 0 advances once all blocks have read it. Flags written with the epoch never match a stale value,
// so nothing is cleaned between calls, and a captured graph's replays advance it like eager calls. Every
// block of the launch must be resident (block 0 waits for the others).
#pragma once

#include <cstdint>

namespace meshcomm::ep {

// This block's epoch: the counter's next value, read before the block counts itself as started.
__device__ __forceinline__ uint64_t beginEpoch(const uint64_t* epoch, uint64_t* started) {
  __shared__ uint64_t e;
  if (threadIdx.x == 0) {
    e = *reinterpret_cast<const volatile uint64_t*>(epoch) + 1;
    atomicAdd(reinterpret_cast<unsigned long long*>(started), 1ull);
  }
  __syncthreads();
  return e;
}

// Block 0 advances the epoch once every block of the call has read it (all blocks are resident).
__device__ __forceinline__ void endEpoch(uint64_t e, uint64_t* epoch, const uint64_t* started) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const uint64_t all = e * gridDim.x;
  while (*reinterpret_cast<const volatile uint64_t*>(started) < all) {
  }
  *reinterpret_cast<volatile uint64_t*>(epoch) = e;
}

}  // namespace meshcomm::ep
