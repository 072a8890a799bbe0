// ProxyService: one host thread that drains a GPU FIFO and turns each trigger into connection
// operations (write, signal, flush). It owns the FIFO, the memories and the host-signalled semaphores
// its PortChannels refer to by id. Thread runs between startProxy() and stopProxy()/destruction.
#pragma once

#include <cstdint>
#include <memory>

#include "meshcomm/communicator.hpp"
#include "meshcomm/device/fifo_device.hpp"
#include "meshcomm/port_channel.hpp"
#include "meshcomm/semaphore.hpp"

namespace meshcomm {

using MemoryId = uint32_t;
using SemaphoreId = uint32_t;

class ProxyService {
 public:
  // fifoSize 0: MESHCOMM_FIFO_SIZE.
  explicit ProxyService(Communicator& comm, size_t fifoSize = 0);
  ~ProxyService();
  ProxyService(const ProxyService&) = delete;
  ProxyService& operator=(const ProxyService&) = delete;

  // (pair) Builds a Host2DeviceSemaphore over `conn`; its id doubles as the channel id in triggers.
  SemaphoreId buildAndAddSemaphore(const std::shared_ptr<Connection>& conn, int tag);
  // Registers a memory (local, or a peer's received with recvMemory) for use in triggers.
  MemoryId addMemory(RegisteredMemory mem);
  // A channel that writes into `dst` from `src` and signals through semaphore `sem`.
  PortChannel portChannel(SemaphoreId sem, MemoryId dst, MemoryId src);

  void startProxy();
  // Drains nothing further; returns after the thread has stopped. Safe to call twice.
  void stopProxy();
  // Throws the error the proxy thread stopped on (a bad trigger, a failed connection), if any.
  void checkError() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm
