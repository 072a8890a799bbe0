// Host objects behind the device semaphore handles. Both are built by the two ends together (pair):
// each side allocates its inbound token, sends it to the peer and receives the peer's.
#pragma once

#include <memory>

#include "meshcomm/communicator.hpp"
#include "meshcomm/device/semaphore_device.hpp"

namespace meshcomm {

// GPU -> GPU over a CUDA IPC connection (the GPU adds to the peer's mapped token).
class MemoryDevice2DeviceSemaphore {
 public:
  // (pair) `tag` distinguishes concurrent constructions between the same pair. Error naming rank and peer
  // if the connection is not CUDA IPC.
  MemoryDevice2DeviceSemaphore(Communicator& comm, const std::shared_ptr<Connection>& conn, int tag);
  MemoryDevice2DeviceSemaphoreDeviceHandle deviceHandle() const { return handle_; }
  int remoteRank() const { return remoteRank_; }

 private:
  Communicator::Token inbound_;
  RegisteredMemory remoteToken_;  // keeps the peer mapping alive
  MemoryDevice2DeviceSemaphoreDeviceHandle handle_{};
  int remoteRank_;
};

// Host (proxy) -> GPU: signal() runs on the host and lands in the peer's token through the connection,
// after the connection's earlier writes.
class Host2DeviceSemaphore {
 public:
  // (pair)
  Host2DeviceSemaphore(Communicator& comm, std::shared_ptr<Connection> conn, int tag);
  void signal();
  Host2DeviceSemaphoreDeviceHandle deviceHandle() const { return handle_; }
  const std::shared_ptr<Connection>& connection() const { return conn_; }

 private:
  std::shared_ptr<Connection> conn_;
  Communicator::Token inbound_;
  RegisteredMemory remoteToken_;  // the peer's token (mapped for CUDA IPC, addressed by id for TCP)
  uint64_t remoteTokenOffset_ = 0;
  uint64_t outbound_ = 0;  // signals sent so far (host side)
  Host2DeviceSemaphoreDeviceHandle handle_{};
};

}  // namespace meshcomm
