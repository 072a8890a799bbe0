#include "meshcomm/buffer_registry.hpp"

#include <cuda_runtime.h>

#include "collectives/memory_exchange.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {
constexpr int kRegistrationTag = 0x3c00000 + 16;  // distinct from CommResources' pair-exchange tags
}

BufferRegistry::BufferRegistry(Communicator& comm)
    : comm_(comm),
      entries_(kMaxEntries),
      deviceBases_(sizeof(void*) * kMaxEntries * comm.size()),
      deviceSizes_(sizeof(uint64_t) * kMaxEntries * comm.size()) {
  MESHCOMM_CUDA_CHECK(cudaMemset(deviceBases_.data(), 0, deviceBases_.size()));
  MESHCOMM_CUDA_CHECK(cudaMemset(deviceSizes_.data(), 0, deviceSizes_.size()));
  view_.bases = static_cast<void* const*>(deviceBases_.data());
  view_.sizes = static_cast<const uint64_t*>(deviceSizes_.data());
  view_.maxEntries = kMaxEntries;
}

BufferRegistry::~BufferRegistry() = default;

BufferRegistration BufferRegistry::add(void* ptr, size_t bytes) {
  const int rank = comm_.rank(), n = comm_.size();
  MESHCOMM_REQUIRE(ptr != nullptr && bytes > 0, "rank ", rank, ": registerBuffer: buffer: null or empty (",
                   ptr, ", ", bytes, " bytes)");
  int32_t index = -1;
  for (int32_t k = 0; k < kMaxEntries && index < 0; ++k)
    if (entries_[k].byRank.empty()) index = k;
  MESHCOMM_REQUIRE(index >= 0, "rank ", rank, ": registerBuffer: all ", kMaxEntries,
                   " registrations are in use (deregister buffers first)");
  // Every rank must reach the same slot: a rank whose registry differs (a skipped registration) fails here
  // instead of mixing up buffers.
  std::vector<int32_t> indices(n);
  indices[rank] = index;
  comm_.bootstrap().allGather(indices.data(), sizeof(int32_t));
  for (int p = 0; p < n; ++p) {
    MESHCOMM_REQUIRE(indices[p] == index, "rank ", rank, ": registerBuffer: registration index ", index,
                     " here but ", indices[p], " on rank ", p,
                     " (every rank must register and deregister the same buffers in the same order)");
  }
  Entry e;
  e.byRank = exchangeWithAllPeers(comm_, comm_.registerMemory(ptr, bytes), kRegistrationTag,
                                  "registerBuffer: the registered buffer");
  e.base = reinterpret_cast<uintptr_t>(ptr);
  e.bytes = bytes;
  std::vector<void*> bases(n);
  std::vector<uint64_t> sizes(n);
  for (int r = 0; r < n; ++r) {
    bases[r] = e.byRank[r].data();
    sizes[r] = e.byRank[r].size();
  }
  const size_t row = static_cast<size_t>(index) * n;
  copyToDevice(static_cast<void**>(deviceBases_.data()) + row, bases.data(), sizeof(void*) * n);
  copyToDevice(static_cast<uint64_t*>(deviceSizes_.data()) + row, sizes.data(), sizeof(uint64_t) * n);
  byBase_.emplace(e.base, index);
  entries_[index] = std::move(e);
  return BufferRegistration{index};
}

void BufferRegistry::remove(BufferRegistration registration) {
  const int rank = comm_.rank(), n = comm_.size();
  const int32_t index = registration.index;
  MESHCOMM_REQUIRE(index >= 0 && index < kMaxEntries && !entries_[index].byRank.empty(), "rank ", rank,
                   ": deregisterBuffer: registration: ", index, " is not registered");
  // Kernels of any stream may still read or write the peers' buffers: drain this GPU, then wait until every
  // peer has drained its GPU too before the mappings go.
  MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());
  comm_.bootstrap().barrier();
  const size_t row = static_cast<size_t>(index) * n;
  MESHCOMM_CUDA_CHECK(cudaMemset(static_cast<void**>(deviceBases_.data()) + row, 0, sizeof(void*) * n));
  MESHCOMM_CUDA_CHECK(cudaMemset(static_cast<uint64_t*>(deviceSizes_.data()) + row, 0, sizeof(uint64_t) * n));
  Entry& e = entries_[index];
  for (auto [it, end] = byBase_.equal_range(e.base); it != end; ++it) {
    if (it->second == index) {
      byBase_.erase(it);
      break;
    }
  }
  e = Entry{};
}

RegisteredSpan BufferRegistry::find(const void* ptr, size_t bytes) const {
  if (byBase_.empty() || ptr == nullptr) return {};
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  // Candidates start at or below ptr; the nearest ones first. Registrations are few, overlaps rare.
  for (auto it = byBase_.upper_bound(a); it != byBase_.begin();) {
    --it;
    const Entry& e = entries_[it->second];
    if (a + bytes <= e.base + e.bytes) return RegisteredSpan{it->second, a - e.base};
  }
  return {};
}

}  // namespace meshcomm
