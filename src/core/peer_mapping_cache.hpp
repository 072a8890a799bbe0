// Process-wide cache of imported peer allocations (CUDA IPC handles and cuMem POSIX fds). One import per
// (owner host, owner pid, allocation export, local device), shared by every RegisteredMemory that refers to
// it and unmapped when the last of them is destroyed, so repeated registrations of the same peer buffer
// (token pools, torch caching-allocator segments) map it once and never leak. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/registered_memory_impl.hpp"

namespace meshcomm {

// One imported peer allocation, mapped at `base` (the owner's allocation base) on `localDevice`.
struct PeerMapping {
  enum class Type { CudaIpc, CuMem };
  Type type = Type::CudaIpc;
  void* base = nullptr;
  size_t mappedSize = 0;          // bytes mapped (the owner's allocation size)
  size_t reservedSize = 0;        // CuMem: VA reserved (mappedSize rounded up to the granularity)
  unsigned long long handle = 0;  // CuMem: the imported CUmemGenericAllocationHandle
  int localDevice = -1;
};

class PeerMappingCache {
 public:
  // The process-wide cache (never destroyed, so releases from static destructors stay safe).
  static PeerMappingCache& instance();

  // Returns the mapping of the allocation `desc` describes (DeviceCudaMalloc or DeviceCuMem of another
  // process on this host), importing it on first use. `fetchTimeoutSec` bounds the fd broker request.
  // Errors name `context` (rank, peer, operation), the owner and the failing call.
  std::shared_ptr<const PeerMapping> acquire(const MemoryDescriptor& desc, int localDevice,
                                             double fetchTimeoutSec, const std::string& context);

  // Number of live imports (for tests and leak checks).
  size_t liveMappings() const;

 private:
  PeerMappingCache() = default;
  struct Entry {
    std::unique_ptr<PeerMapping> mapping;
    size_t refs = 0;
  };
  class Releaser;
  void release(const std::string& key) noexcept;

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

// Same-process peers: makes `ownerDevice`'s memory accessible from `localDevice` (peer access), no import.
void enablePeerAccess(int localDevice, int ownerDevice, const std::string& context);

}  // namespace meshcomm
