// Communicator internals, for the core and the transports/proxy. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "core/registered_memory_impl.hpp"
#include "meshcomm/communicator.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

namespace internal {

// Internal bootstrap tags: kInternalTagBase + space * 2^kTagSpaceBits + userTag, so exchanges of different
// kinds, and of one kind with different user tags, never share a (sender, receiver, tag) stream. Both
// directions of a pair exchange may use the same tag (the streams differ by sender).
enum class TagSpace : int {
  MemorySemaphore = 0,  // MemoryDevice2DeviceSemaphore construction
  HostSemaphore = 1,    // Host2DeviceSemaphore construction
  CudaIpcConnection = 2,
  TcpConnection = 3,
  Proxy = 4,
  // 5..15 free
};
constexpr int kTagSpaceBits = 26;
constexpr int kMaxTagSpaces = 16;  // kInternalTagBase + 16 * 2^26 - 1 == INT_MAX
static_assert(kInternalTagBase + (static_cast<long long>(kMaxTagSpaces) << kTagSpaceBits) - 1 == 0x7fffffffLL,
              "internal tag spaces must fill [kInternalTagBase, INT_MAX]");

// The internal tag of (space, userTag). Throws Error(InvalidUsage) naming `what`, rank and peer when
// userTag is outside [0, 2^26).
int internalTag(TagSpace space, int userTag, const char* what, int rank, int peer);

}  // namespace internal

class Communicator::Impl {
 public:
  Impl(std::shared_ptr<Bootstrap> bootstrap, int cudaDevice);
  // Synchronizes the device (no kernel may still use the token pool or the error report), then frees what
  // the communicator owns. No bootstrap barrier here: a dead peer would hang it. Callers quiesce first
  // (drain their streams, destroy channels/semaphores/connections, barrier) before destroying it.
  ~Impl();

  // Fixed at construction.
  const std::shared_ptr<Bootstrap> bootstrap;
  const int rank;
  const int size;
  const int device;
  const uint64_t hostId;           // bootstrap->hostId(rank)
  const bool forceTcp;             // MESHCOMM_TRANSPORT=tcp
  const uint64_t deviceTimeoutNs;  // MESHCOMM_DEVICE_TIMEOUT_MS in ns (0: none)
  const double fetchTimeoutSec;    // fd broker requests (MESHCOMM_BOOTSTRAP_TIMEOUT)
  // Live local registrations and cuMem exports; shared with every local RegisteredMemory, so it outlives
  // the communicator while registrations do. Transports that resolve memory ids from their own threads can
  // hold this pointer instead of the Communicator.
  const std::shared_ptr<LocalRegistry> registry;

  // "rank R"
  std::string who() const;
  // Throws InvalidUsage ("rank R: <op>: peer P out of range [0, N)") for a bad peer.
  void checkPeer(int peer, const char* op) const;

  RegisteredMemory registerMemory(void* ptr, size_t bytes, std::shared_ptr<void> keepAlive = nullptr);
  void sendMemory(const RegisteredMemory& mem, int peer, int tag);
  RegisteredMemory recvMemory(int peer, int tag);
  Transport transportTo(int peer) const;

  Communicator::Token allocateToken();
  Communicator::Token allocateHostToken();
  uint64_t* allocateCounter();

  SpinContext spinContext(int peer) const;
  DeviceErrorReport* hostReport() const { return static_cast<DeviceErrorReport*>(errorReport_.host()); }
  void checkDeviceError() const;
  void clearDeviceError();
  void abortDeviceWaits();

  // Pool sizes (for tests).
  static constexpr size_t kPoolChunkBytes = 64 * 1024;
  static constexpr size_t kSlotsPerChunk = kPoolChunkBytes / sizeof(uint64_t);

 private:
  HostMappedBuffer errorReport_;
  std::mutex poolMu_;
  // A pool of 8-byte token slots in registered chunks (each keeps its buffer alive, also beyond the
  // communicator): device memory, or pinned host memory mapped for the GPU.
  struct TokenPool {
    std::vector<RegisteredMemory> chunks;
    size_t used = 0;  // slots used in chunks.back()
  };
  Communicator::Token allocateFrom(TokenPool& pool, bool hostMapped);
  TokenPool deviceTokens_, hostTokens_;
  std::vector<std::unique_ptr<GpuBuffer>> counterChunks_;
  size_t countersUsed_ = 0;
};

}  // namespace meshcomm
