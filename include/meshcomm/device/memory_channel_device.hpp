// MemoryChannel: this GPU's loads and stores into one peer's registered memory over NVLink (CUDA IPC),
// plus a GPU-to-GPU semaphore pair and an optional packet buffer for LL packets.
#pragma once

#include <cstdint>

#include "meshcomm/device/copy.hpp"
#include "meshcomm/device/packet.hpp"
#include "meshcomm/device/semaphore_device.hpp"

namespace meshcomm {

struct MemoryChannelDeviceHandle {
  MemoryDevice2DeviceSemaphoreDeviceHandle semaphore;
  void* dst;           // the peer's memory, mapped here (target of put, source of get)
  void* src;           // this rank's memory (source of put, target of get and of unpackPackets)
  void* packetBuffer;  // this rank's memory that the peer writes packets into (may be null)

#if defined(__CUDACC__)
  // Weak copy src+srcOffset -> peer dst+dstOffset by thread tid of nThreads (pass threadIdx.x/blockDim.x
  // for a block, the lane/32 for a warp, 0/1 for a thread). Publish with __syncthreads() + signal().
  MESHCOMM_DEVICE_INLINE void put(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, uint32_t tid,
                                  uint32_t nThreads) {
    device::copy(static_cast<char*>(dst) + dstOffset, static_cast<const char*>(src) + srcOffset, bytes, tid,
                 nThreads);
  }
  // Weak copy peer dst+dstOffset -> local src+srcOffset (reads the peer; it must have signalled first).
  MESHCOMM_DEVICE_INLINE void get(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes, uint32_t tid,
                                  uint32_t nThreads) {
    device::copy(static_cast<char*>(src) + srcOffset, static_cast<const char*>(dst) + dstOffset, bytes, tid,
                 nThreads);
  }
  MESHCOMM_DEVICE_INLINE void putWarp(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
    put(dstOffset, srcOffset, bytes, threadIdx.x % 32, 32);
  }
  MESHCOMM_DEVICE_INLINE void putBlock(uint64_t dstOffset, uint64_t srcOffset, uint64_t bytes) {
    put(dstOffset, srcOffset, bytes, threadIdx.x, blockDim.x);
  }

  // LL: writes `bytes` of src+srcOffset as packets carrying `flag` at peer dst+dstPacketOffset (bytes of
  // packet buffer). No signal needed: the reader spins on the flags.
  template <typename Packet = LL16Packet>
  MESHCOMM_DEVICE_INLINE void putPackets(uint64_t dstPacketOffset, uint64_t srcOffset, uint64_t bytes,
                                         uint32_t flag, uint32_t tid, uint32_t nThreads) {
    device::putPackets<Packet>(reinterpret_cast<Packet*>(static_cast<char*>(dst) + dstPacketOffset),
                               static_cast<const char*>(src) + srcOffset, bytes, flag, tid, nThreads);
  }
  // LL: waits for packets with `flag` at packetBuffer+packetOffset and unpacks `bytes` into src+srcOffset.
  template <typename Packet = LL16Packet>
  MESHCOMM_DEVICE_INLINE bool unpackPackets(uint64_t srcOffset, uint64_t packetOffset, uint64_t bytes,
                                            uint32_t flag, uint32_t tid, uint32_t nThreads) {
    return device::getPackets<Packet>(
        static_cast<char*>(src) + srcOffset,
        reinterpret_cast<const Packet*>(static_cast<const char*>(packetBuffer) + packetOffset), bytes, flag,
        tid, nThreads, semaphore.spin);
  }

  MESHCOMM_DEVICE_INLINE void signal() {
    semaphore.signal();
  }
  MESHCOMM_DEVICE_INLINE void relaxedSignal() {
    semaphore.relaxedSignal();
  }
  MESHCOMM_DEVICE_INLINE bool wait() {
    return semaphore.wait();
  }
  MESHCOMM_DEVICE_INLINE bool relaxedWait() {
    return semaphore.relaxedWait();
  }
  MESHCOMM_DEVICE_INLINE bool poll() {
    return semaphore.poll();
  }
#endif
};

}  // namespace meshcomm
