// RegisteredMemory internals: the wire descriptor, the per-communicator registry of live local
// registrations (with the cuMem export cache), and RegisteredMemory::Impl. Not installed.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/internal.hpp"
#include "meshcomm/registered_memory.hpp"

namespace meshcomm {

struct PeerMapping;  // core/peer_mapping_cache.hpp

// What one rank tells another about a registration (sent through the bootstrap). Fixed layout, trivially
// copyable; every field is validated by fromBytes() because the bytes come from the network.
struct MemoryDescriptor {
  static constexpr uint64_t kMagic = 0x314d454d4d4f434dull;  // "MCOMMEM1" (little-endian)
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kBrokerNameBytes = 64;

  uint64_t magic;
  uint32_t version;
  uint32_t structBytes;     // sizeof(MemoryDescriptor) at the sender
  int32_t ownerRank;        // the rank that registered the memory
  int32_t deviceIndex;      // the owner's CUDA device (its own numbering)
  uint64_t hostId;          // Bootstrap::hostId(ownerRank)
  uint64_t ownerPid;        // the owner's process id (same pid and host: same address space)
  uint64_t id;              // the owner's registration id (TCP addresses memory by (owner, id))
  uint64_t size;            // registered bytes, starting at base + offsetFromBase
  uint64_t offsetFromBase;  // registered pointer - allocation base
  uint64_t baseSize;        // size of the whole allocation (cuMemGetAddressRange)
  uint64_t ownerBase;       // the allocation base in the owner's address space
  uint64_t exportId;        // DeviceCuMem: the id of the allocation's fd in the owner's fd broker
  uint8_t kind;             // MemoryKind
  uint8_t reserved[7];
  cudaIpcMemHandle_t ipcHandle;       // DeviceCudaMalloc: handle of the allocation base
  char brokerName[kBrokerNameBytes];  // DeviceCuMem: the owner's fd broker, NUL-terminated

  // A descriptor with magic, version and structBytes set and everything else zero.
  static MemoryDescriptor make();
  std::vector<char> toBytes() const;
  // Parses and validates `bytes` bytes; throws Error(RemoteError) whose text starts with `context`.
  static MemoryDescriptor fromBytes(const void* data, size_t bytes, const std::string& context);
  // fromBytes for a descriptor received from `peer`, which must be its owner (a rank shares only its own
  // registrations).
  static MemoryDescriptor fromPeer(const std::vector<char>& bytes, int peer, const std::string& context);
  // The checks of fromBytes on an already-typed descriptor.
  void validate(const std::string& context) const;
  MemoryKind memoryKind() const { return static_cast<MemoryKind>(kind); }
};
static_assert(std::is_trivially_copyable<MemoryDescriptor>::value,
              "MemoryDescriptor goes over the wire as bytes");
static_assert(sizeof(MemoryDescriptor) == 224, "MemoryDescriptor layout changed: bump kVersion");

const char* memoryKindName(MemoryKind kind);

class LocalRegistry;

// Holds one live registration for the duration of an incoming transfer (a TCP receiver's write or update):
// deregistering the memory waits until every lease on it has ended, so the memory stays valid while the
// lease writes into it. A deregistration that starts meanwhile revokes the lease; its holder stops at the
// next chunk (throwIfRevoked). Move-only; the registry must outlive it.
class RegistrationLease {
 public:
  RegistrationLease(LocalRegistry* registry, uint64_t id, int peer, const char* op, char* target,
                    MemoryKind kind)
      : registry_(registry), id_(id), peer_(peer), op_(op), target_(target), kind_(kind) {}
  ~RegistrationLease();
  RegistrationLease(RegistrationLease&& other) noexcept;
  RegistrationLease& operator=(RegistrationLease&&) = delete;
  RegistrationLease(const RegistrationLease&) = delete;
  RegistrationLease& operator=(const RegistrationLease&) = delete;

  // The leased range's first byte, in this process's address space.
  char* target() const { return target_; }
  MemoryKind kind() const { return kind_; }
  // True once a deregistration of the memory has started.
  bool revoked() const;
  // Throws Error(RemoteError) naming rank, peer, operation and memory id once revoked() is true.
  void throwIfRevoked() const;

 private:
  LocalRegistry* registry_;
  uint64_t id_;
  int peer_;
  const char* op_;
  char* target_;
  MemoryKind kind_;
};

// The live local registrations of one communicator, the peers each was sent to, and the cuMem exports they
// share. Held by the communicator and by every local RegisteredMemory::Impl (so a registration may outlive
// its communicator). Registration ids are unique within the process. Thread-safe.
class LocalRegistry {
 public:
  explicit LocalRegistry(int rank) : rank_(rank) {}
  ~LocalRegistry();
  LocalRegistry(const LocalRegistry&) = delete;
  LocalRegistry& operator=(const LocalRegistry&) = delete;

  int rank() const { return rank_; }
  // Adds a registration and returns its id (> 0, never reused in this process).
  uint64_t add(const internal::LocalMemoryView& view);
  // Deregisters `id`: new leases fail at once, and the call returns once every lease on it has ended.
  void remove(uint64_t id) noexcept;
  std::optional<internal::LocalMemoryView> find(uint64_t id) const;
  size_t liveCount() const;

  // Records that `id` was sent to `peer` (sendMemory); throws InvalidUsage naming `context` when `id` is not
  // a live registration of this registry.
  void share(uint64_t id, int peer, const std::string& context);
  // The range [offset, offset+bytes) of registration `id` for an incoming `op` (e.g. "write") from `peer`.
  // Throws Error(RemoteError) naming rank, peer, op, id and range when `id` is not live here, was never sent
  // to `peer`, or the range does not fit (overflow-safe).
  RegistrationLease lease(uint64_t id, int peer, uint64_t offset, uint64_t bytes, const char* op);
  // The address in this process of the registration `d` describes, owned by a communicator of this process
  // and sent to `receiver`; taken from the owner's registry, never from the descriptor's pointers. Throws
  // Error(RemoteError) starting with `context` when no live registration of this process matches.
  static void* sameProcessAddress(const MemoryDescriptor& d, int receiver, const std::string& context);

  // cuMem exports, one per allocation handle, refcounted by registrations. acquireExport takes over one
  // retain of `handle` (from cuMemRetainAllocationHandle) in every case, also when it throws: the first
  // registration of an allocation keeps it (so the handle value cannot be recycled while the export lives)
  // and exports the POSIX fd to the fd broker; later ones release it and share the export. Returns the
  // broker export id.
  uint64_t acquireExport(unsigned long long handle, const std::string& context);
  // Drops one registration's reference; the last one withdraws the fd from the broker and releases the
  // handle.
  void releaseExport(unsigned long long handle) noexcept;
  size_t exportCount() const;

 private:
  friend class RegistrationLease;
  struct Entry {
    internal::LocalMemoryView view;
    std::vector<int> peers;  // the ranks it was sent to
    size_t leases = 0;       // transfers into it in flight
    bool revoked = false;    // being deregistered
  };
  struct Export {
    uint64_t exportId;
    size_t refs;
  };
  // The entry of a live registration that is not being deregistered, or nullptr (requires mu_).
  const Entry* liveEntry(uint64_t id) const;
  Entry* liveEntry(uint64_t id);
  // The entry `d` describes if it is live and was sent to `receiver`, else nullptr (takes mu_).
  std::optional<internal::LocalMemoryView> matching(const MemoryDescriptor& d, int receiver) const;
  void endLease(uint64_t id) noexcept;
  bool isRevoked(uint64_t id) const;

  const int rank_;
  mutable std::mutex mu_;
  std::condition_variable leaseEnded_;
  std::unordered_map<uint64_t, Entry> live_;
  std::unordered_map<unsigned long long, Export> exports_;
};

// Registers [ptr, ptr+bytes) for `rank` on `device` (detects the kind, exports cuMem memory). `keepAlive`
// is held by the registration (e.g. the buffer of a token pool chunk). Errors name rank, pointer, operation.
std::shared_ptr<RegisteredMemory::Impl> registerLocalMemory(const std::shared_ptr<LocalRegistry>& registry,
                                                            int rank, int device, uint64_t hostId, void* ptr,
                                                            size_t bytes,
                                                            std::shared_ptr<void> keepAlive = nullptr);

class RegisteredMemory::Impl {
 public:
  // Local registration (registry may be null in tests: nothing to unregister).
  Impl(const MemoryDescriptor& desc, void* ptr, std::shared_ptr<LocalRegistry> registry, bool hasExport,
       unsigned long long exportHandle, std::shared_ptr<void> keepAlive);
  // Remote: `data` is the mapped pointer (nullptr when not mapped); `mapping` keeps an import alive
  // (nullptr when not mapped, or when the owner is this process and `data` is its own pointer).
  Impl(const MemoryDescriptor& desc, void* data, std::shared_ptr<const PeerMapping> mapping);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  bool isLocal() const { return local_; }
  bool isMapped() const { return data_ != nullptr; }
  void* data() const { return data_; }
  size_t size() const { return static_cast<size_t>(desc_.size); }
  int rank() const { return desc_.ownerRank; }
  uint64_t id() const { return desc_.id; }
  MemoryKind kind() const { return desc_.memoryKind(); }
  const MemoryDescriptor& descriptor() const { return desc_; }
  std::vector<char> serialize() const { return desc_.toBytes(); }
  const std::shared_ptr<const PeerMapping>& mapping() const { return mapping_; }

 private:
  MemoryDescriptor desc_;
  bool local_;
  void* data_;
  // local
  std::shared_ptr<LocalRegistry> registry_;
  bool hasExport_ = false;
  unsigned long long exportHandle_ = 0;
  std::shared_ptr<void> keepAlive_;
  // remote
  std::shared_ptr<const PeerMapping> mapping_;
};

}  // namespace meshcomm
