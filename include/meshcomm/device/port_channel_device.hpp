// PortChannel: the GPU asks a host proxy to move data (copy engine for CUDA IPC peers, sockets for TCP
// peers) and to signal the peer. All calls are made by one thread; the data moves asynchronously.
#pragma once

#include <cstdint>

#include "meshcomm/device/fifo_device.hpp"
#include "meshcomm/device/semaphore_device.hpp"

namespace meshcomm {

struct PortChannelDeviceHandle {
  FifoDeviceHandle fifo;
  Host2DeviceSemaphoreDeviceHandle semaphore;  // signalled by the peer's proxy
  uint32_t channelId;                          // proxy-side (connection, semaphore) index
  uint32_t dstMemoryId;                        // default destination (the peer's memory)
  uint32_t srcMemoryId;                        // default source (this rank's memory)

#if defined(__CUDACC__)
  // Enqueues a copy; returns at once. Release as FifoDeviceHandle::push. Source must stay unchanged
  // until a later flush() returns.
  MESHCOMM_DEVICE_INLINE void put(uint32_t dstMemory, uint64_t dstOffset, uint32_t srcMemory,
                                  uint64_t srcOffset, uint64_t bytes) {
    fifo.push(kTriggerData, channelId, srcMemory, dstMemory, srcOffset, dstOffset, bytes);
  }
  MESHCOMM_DEVICE_INLINE void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
    put(dstMemoryId, dstOffset, srcMemoryId, srcOffset, bytes);
  }
  // Signals the peer after every earlier put of this channel has landed there.
  MESHCOMM_DEVICE_INLINE void signal() {
    fifo.push(kTriggerSignal, channelId, 0, 0, 0, 0, 0);
  }
  MESHCOMM_DEVICE_INLINE void putWithSignal(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
    fifo.push(kTriggerData | kTriggerSignal, channelId, srcMemoryId, dstMemoryId, srcOffset, dstOffset,
              bytes);
  }
  // As putWithSignal, then waits until the proxy has completed it (the source may then be reused).
  MESHCOMM_DEVICE_INLINE bool putWithSignalAndFlush(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
    uint64_t pos = fifo.push(kTriggerData | kTriggerSignal | kTriggerFlush, channelId, srcMemoryId,
                             dstMemoryId, srcOffset, dstOffset, bytes);
    return pos != ~0ull && fifo.waitFlushed(pos);
  }
  // Waits until every earlier operation of this channel has completed.
  MESHCOMM_DEVICE_INLINE bool flush() {
    uint64_t pos = fifo.push(kTriggerFlush, channelId, 0, 0, 0, 0, 0);
    return pos != ~0ull && fifo.waitFlushed(pos);
  }
  // Acquire wait for the peer's next signal.
  MESHCOMM_DEVICE_INLINE bool wait() {
    return semaphore.wait();
  }
  MESHCOMM_DEVICE_INLINE bool poll() {
    return semaphore.poll();
  }
#endif
};

}  // namespace meshcomm
