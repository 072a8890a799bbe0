// BufferRegistry: user buffers registered collectively with a Comm (Comm::registerBuffer), so zero-copy
// algorithms can load from and store to the peers' buffers directly over NVLink instead of staging
// through the shared scratch. Every rank registers its own buffer in the same call (same order on every
// rank, so registration k means "this call's buffer" everywhere); each rank maps every peer's buffer k
// (CUDA IPC) and keeps a device table of the mappings. A collective call whose buffers lie inside
// registrations finds (registration, offset) on the host without synchronisation; the device learns the
// peers' (registration, offset) inside the kernel (they may differ per rank). docs/collectives.md,
// "Registered buffers and zero-copy", has the contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "meshcomm/algorithm.hpp"
#include "meshcomm/communicator.hpp"
#include "meshcomm/device/macros.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/registered_memory.hpp"

namespace meshcomm {

// What Comm::registerBuffer returns: the registration's index (the same on every rank).
struct BufferRegistration {
  int32_t index = -1;
  explicit operator bool() const { return index >= 0; }
};

// Device view of the registry: entry (k, r) = rank r's registration k as mapped on this GPU (own buffer at
// r = this rank), null where slot k is free. Sizes likewise.
struct RegistryDeviceView {
  void* const* bases;     // [maxEntries][nRanks]
  const uint64_t* sizes;  // [maxEntries][nRanks]
  int32_t maxEntries;
};

#if defined(__CUDACC__)
// Rank `owner`'s registration `index` as mapped here, at `offset`, when [offset, offset + bytes) lies in it;
// null otherwise (a free slot, an index out of range, a span past the registration). Plain loads of the
// table.
MESHCOMM_DEVICE_INLINE char* registeredAt(const RegistryDeviceView& r, int nRanks, int owner, int32_t index,
                                          uint64_t offset, uint64_t bytes) {
  if (index < 0 || index >= r.maxEntries) return nullptr;
  const uint64_t k =
      static_cast<uint64_t>(index) * static_cast<uint64_t>(nRanks) + static_cast<uint64_t>(owner);
  char* base = static_cast<char*>(r.bases[k]);
  const uint64_t size = r.sizes[k];
  if (base == nullptr || offset > size || bytes > size - offset) return nullptr;
  return base + offset;
}
#endif

class BufferRegistry {
 public:
  static constexpr int kMaxEntries = 1024;

  explicit BufferRegistry(Communicator& comm);
  ~BufferRegistry();
  BufferRegistry(const BufferRegistry&) = delete;
  BufferRegistry& operator=(const BufferRegistry&) = delete;

  // Collective (every rank, same order): registers [ptr, ptr + bytes) of this rank's device memory
  // (cudaMalloc or cuMem memory of the communicator's GPU), maps every peer's buffer of this call and updates
  // the device table (synchronously: not during graph capture). The lowest free index is used, so indices
  // agree.
  BufferRegistration add(void* ptr, size_t bytes);
  // Collective: waits for the device, agrees with the peers (bootstrap barrier), unmaps and frees the slot.
  void remove(BufferRegistration registration);

  // Host lookup, no synchronisation: the registration holding all of [ptr, ptr + bytes), or index -1.
  RegisteredSpan find(const void* ptr, size_t bytes) const;
  size_t count() const { return byBase_.size(); }
  const RegistryDeviceView& deviceView() const { return view_; }

 private:
  struct Entry {
    std::vector<RegisteredMemory> byRank;  // own at [rank]
    uintptr_t base = 0;
    size_t bytes = 0;
  };
  Communicator& comm_;
  std::vector<Entry> entries_;                // [kMaxEntries]; free when byRank is empty
  std::multimap<uintptr_t, int32_t> byBase_;  // own base address -> index (bases may repeat)
  GpuBuffer deviceBases_;
  GpuBuffer deviceSizes_;
  RegistryDeviceView view_{};
};

}  // namespace meshcomm
