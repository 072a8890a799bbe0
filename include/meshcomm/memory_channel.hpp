// MemoryChannel host object: pairs a D2D semaphore with a peer's mapped memory and local memory.
#pragma once

#include <memory>

#include "meshcomm/device/memory_channel_device.hpp"
#include "meshcomm/registered_memory.hpp"
#include "meshcomm/semaphore.hpp"

namespace meshcomm {

class MemoryChannel {
 public:
  MemoryChannel() = default;
  // `dst`: the peer's memory (must be mapped here, else an error naming rank and peer); `src`: local
  // memory; `packetBuffer`: local memory the peer writes packets into (may be empty).
  MemoryChannel(std::shared_ptr<MemoryDevice2DeviceSemaphore> semaphore, RegisteredMemory dst,
                RegisteredMemory src, RegisteredMemory packetBuffer = {});
  MemoryChannelDeviceHandle deviceHandle() const;

 private:
  std::shared_ptr<MemoryDevice2DeviceSemaphore> semaphore_;
  RegisteredMemory dst_, src_, packetBuffer_;
};

}  // namespace meshcomm
