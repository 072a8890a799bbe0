// RegisteredMemory: a range of memory known to the Communicator, either this rank's (local) or a peer's
// (remote, received with Communicator::recvMemory). Remote device memory on the same host is mapped here
// through CUDA IPC (cudaMalloc memory: cudaIpc handles; cuMem memory: POSIX fds passed over a private
// unix socket). Mappings are cached per peer allocation and released when the last RegisteredMemory
// referring to them is destroyed. Copies of a RegisteredMemory share one registration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace meshcomm {

enum class MemoryKind : uint8_t {
  DeviceCudaMalloc = 1,  // cudaMalloc'd device memory (e.g. torch tensors)
  DeviceCuMem = 2,       // cuMemCreate'd device memory exportable as a POSIX fd
  Host = 3,              // pinned host memory (cudaMallocHost/cudaHostAlloc/cudaHostRegister)
};

class RegisteredMemory {
 public:
  RegisteredMemory() = default;

  // Local: the registered pointer. Remote: the mapped pointer, or nullptr where the memory is not mapped
  // here (other host, host memory, or TCP transport): such memory is reachable only through a connection.
  void* data() const;
  size_t size() const;
  int rank() const;  // the owner
  bool isLocal() const;
  bool isMapped() const;  // data() is usable on this rank's GPU
  MemoryKind kind() const;
  // The owner's id of this registration; TCP connections address memory by (owner rank, id).
  uint64_t id() const;
  explicit operator bool() const { return impl_ != nullptr; }

  class Impl;
  explicit RegisteredMemory(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace meshcomm
