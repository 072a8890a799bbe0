// Device helpers over CommDeviceView shared by the built-in algorithms.
#pragma once

#include <cstdint>

#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/memory_channel_device.hpp"

#if defined(__CUDACC__)
namespace meshcomm::device {

// The channel to `peer` with index `c` (a reference into the device array of handles).
MESHCOMM_DEVICE_INLINE MemoryChannelDeviceHandle& channelRef(const CommDeviceView& v, int peer, int c) {
  return v.channels[peer * v.channelsPerPeer + c];
}

// The i-th peer (0 <= i < nRanks-1) in an order that starts at rank+1, so that ranks spread their
// traffic over different peers at the same time.
MESHCOMM_DEVICE_INLINE int peerAt(const CommDeviceView& v, int i) {
  return (v.rank + 1 + i) % v.nRanks;
}

// Threads 0..nRanks-2 of the calling block each signal one peer on channel `c`. Release: the block's
// earlier writes are visible to every peer after its matching wait (call __syncthreads() first).
MESHCOMM_DEVICE_INLINE void signalAllPeers(const CommDeviceView& v, int c) {
  const int i = threadIdx.x;
  if (i < v.nRanks - 1) channelRef(v, peerAt(v, i), c).signal();
}

// Threads 0..nRanks-2 each wait for one peer on channel `c`, then the block synchronises. Acquire: the
// peers' writes before their signals are visible to the whole block afterwards. Returns false on timeout.
MESHCOMM_DEVICE_INLINE bool waitAllPeers(const CommDeviceView& v, int c) {
  const int i = threadIdx.x;
  int ok = 1;
  if (i < v.nRanks - 1) ok = channelRef(v, peerAt(v, i), c).wait() ? 1 : 0;
  return __syncthreads_and(ok) != 0;
}

// Relaxed variants: execution barriers that order no data.
MESHCOMM_DEVICE_INLINE void relaxedSignalAllPeers(const CommDeviceView& v, int c) {
  const int i = threadIdx.x;
  if (i < v.nRanks - 1) channelRef(v, peerAt(v, i), c).relaxedSignal();
}
MESHCOMM_DEVICE_INLINE bool relaxedWaitAllPeers(const CommDeviceView& v, int c) {
  const int i = threadIdx.x;
  int ok = 1;
  if (i < v.nRanks - 1) ok = channelRef(v, peerAt(v, i), c).relaxedWait() ? 1 : 0;
  return __syncthreads_and(ok) != 0;
}

// Block-wide barrier with every peer on channel `c` (release + acquire); needs blockDim.x >= nRanks-1.
MESHCOMM_DEVICE_INLINE bool barrierAllPeers(const CommDeviceView& v, int c) {
  __syncthreads();
  signalAllPeers(v, c);
  return waitAllPeers(v, c);
}

}  // namespace meshcomm::device
#endif
