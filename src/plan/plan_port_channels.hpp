// The port channels of a rank's plan: a ProxyService (its host thread), one Host2DeviceSemaphore per port
// channel over the CUDA IPC connection the memory channels use to that peer, the communicator's scratch
// buffers as the proxy's memories (a put writes the peer's scratch from this rank's), and the device array
// of channel handles the executor indexes by plan channel. docs/dsl.md, "Port channels".
#pragma once

#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/port_channel_device.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/plan.hpp"
#include "meshcomm/proxy.hpp"

namespace meshcomm::plan {

class PortChannels {
 public:
  // Collective over the ranks with port channels in the plan (the channels are paired, so a rank builds its
  // semaphores with exactly the peers that build theirs with it). The semaphores are built in one global
  // order of (lower rank, higher rank, index), so no two ranks wait on each other in a cycle.
  PortChannels(CommResources& resources, const RankPlan& mine);
  ~PortChannels();
  PortChannels(const PortChannels&) = delete;
  PortChannels& operator=(const PortChannels&) = delete;

  // [the rank's plan channels]: the handle of each port channel (memory channels' entries are zero).
  const PortChannelDeviceHandle* deviceHandles() const {
    return static_cast<const PortChannelDeviceHandle*>(handles_.data());
  }
  // Throws the error the proxy stopped on (a trigger out of a scratch buffer's bounds), if any.
  void checkError() const { proxy_.checkError(); }

 private:
  ProxyService proxy_;
  GpuBuffer handles_;
};

}  // namespace meshcomm::plan
