// PortChannel host object: the device handle of one (semaphore, dst memory, src memory) of a ProxyService.
#pragma once

#include "meshcomm/device/port_channel_device.hpp"

namespace meshcomm {

class PortChannel {
 public:
  PortChannel() = default;
  explicit PortChannel(const PortChannelDeviceHandle& handle) : handle_(handle) {}
  PortChannelDeviceHandle deviceHandle() const { return handle_; }

 private:
  PortChannelDeviceHandle handle_{};
};

}  // namespace meshcomm
