// Seams between the core (communicator, registered memory) and the transports/proxy. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "meshcomm/communicator.hpp"
#include "meshcomm/connection.hpp"

namespace meshcomm::internal {

// A live local registration, looked up by its id.
struct LocalMemoryView {
  void* ptr;
  size_t size;
  MemoryKind kind;
};
std::optional<LocalMemoryView> findLocalMemory(const Communicator& comm, uint64_t id);

// Transport factories used by Communicator::connect (pair: both ends call with the same tag).
std::shared_ptr<Connection> makeCudaIpcConnection(Communicator& comm, int peer, int tag);
std::shared_ptr<Connection> makeTcpConnection(Communicator& comm, int peer, int tag);

// Bootstrap tags reserved for internal exchanges are >= kInternalTagBase; user tags stay below it.
constexpr int kInternalTagBase = 1 << 30;

}  // namespace meshcomm::internal
