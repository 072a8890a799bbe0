#include "meshcomm/registered_memory.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <cstring>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "core/fd_broker.hpp"
#include "core/peer_mapping_cache.hpp"
#include "core/registered_memory_impl.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "transport/range_check.hpp"

namespace meshcomm {

// ---- LocalRegistry -----------------------------------------------------------------------------------

namespace {

std::atomic<uint64_t> nextRegistrationId{1};

// Which registry holds each live registration of this process, so that a descriptor naming this process
// resolves to its owner's registry. Lock order: this directory's mutex, then a registry's.
class ProcessDirectory {
 public:
  static ProcessDirectory& instance() {
    static ProcessDirectory* directory = new ProcessDirectory();  // never destroyed: used by static teardown
    return *directory;
  }
  void insert(uint64_t id, const LocalRegistry* registry) {
    std::lock_guard<std::mutex> lock(mu_);
    owners_.emplace(id, registry);
  }
  void erase(uint64_t id) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    owners_.erase(id);
  }
  // Runs `use` on the registry of `id` (nullptr when none) while that registry cannot go away.
  template <typename Fn>
  auto withOwner(uint64_t id, Fn&& use) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = owners_.find(id);
    return use(it == owners_.end() ? nullptr : it->second);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, const LocalRegistry*> owners_;
};

}  // namespace

LocalRegistry::~LocalRegistry() {
  // Every registration holds the registry, so nothing is left here in normal operation; be safe anyway.
  for (const auto& kv : live_) ProcessDirectory::instance().erase(kv.first);
  for (auto& kv : exports_) {
    FdBroker::instance().withdraw(kv.second.exportId);
    try {
      cuDriver().cuMemRelease(static_cast<CUmemGenericAllocationHandle>(kv.first));
    } catch (...) {
    }
  }
}

uint64_t LocalRegistry::add(const internal::LocalMemoryView& view) {
  const uint64_t id = nextRegistrationId.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.emplace(id, Entry{view, {}, 0, false});
  }
  try {
    ProcessDirectory::instance().insert(id, this);
  } catch (...) {
    remove(id);
    throw;
  }
  return id;
}

void LocalRegistry::remove(uint64_t id) noexcept {
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return;
    it->second.revoked = true;
    leaseEnded_.wait(lock, [&] {
      auto e = live_.find(id);
      return e == live_.end() || e->second.leases == 0;
    });
    live_.erase(id);
  }
  ProcessDirectory::instance().erase(id);
}

LocalRegistry::Entry* LocalRegistry::liveEntry(uint64_t id) {
  return const_cast<Entry*>(std::as_const(*this).liveEntry(id));
}

const LocalRegistry::Entry* LocalRegistry::liveEntry(uint64_t id) const {
  auto it = live_.find(id);
  if (it == live_.end() || it->second.revoked) return nullptr;
  return &it->second;
}

std::optional<internal::LocalMemoryView> LocalRegistry::find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = liveEntry(id);
  if (e == nullptr) return std::nullopt;
  return e->view;
}

size_t LocalRegistry::liveCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

void LocalRegistry::share(uint64_t id, int peer, const std::string& context) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = liveEntry(id);
  if (e == nullptr) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, context, ": memory id ", id,
                   " is not a live registration of this communicator (rank ", rank_, ")");
  }
  std::vector<int>& peers = e->peers;
  if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
}

RegistrationLease LocalRegistry::lease(uint64_t id, int peer, uint64_t offset, uint64_t bytes,
                                       const char* op) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto refuse = [&](const auto&... why) {
    MESHCOMM_THROW(ErrorCode::RemoteError, "rank ", rank_, ": ", op, " from peer ", peer, " into memory id ",
                   id, " (range [", offset, ", +", bytes, " bytes)): ", why...);
  };
  Entry* e = liveEntry(id);
  if (e == nullptr) refuse("the id is not registered on this rank");
  if (std::find(e->peers.begin(), e->peers.end(), peer) == e->peers.end()) {
    refuse("this rank never sent that memory to peer ", peer);
  }
  if (!internal::rangeWithin(offset, bytes, e->view.size)) {
    refuse("the range exceeds the registration's ", e->view.size, " bytes");
  }
  ++e->leases;
  return RegistrationLease(this, id, peer, op, static_cast<char*>(e->view.ptr) + offset, e->view.kind);
}

void LocalRegistry::endLease(uint64_t id) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(id);
    if (it != live_.end() && it->second.leases > 0) --it->second.leases;
  }
  leaseEnded_.notify_all();
}

bool LocalRegistry::isRevoked(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return liveEntry(id) == nullptr;
}

std::optional<internal::LocalMemoryView> LocalRegistry::matching(const MemoryDescriptor& d,
                                                                 int receiver) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = liveEntry(d.id);
  if (e == nullptr || rank_ != d.ownerRank || e->view.size != d.size || e->view.kind != d.memoryKind()) {
    return std::nullopt;
  }
  if (std::find(e->peers.begin(), e->peers.end(), receiver) == e->peers.end()) return std::nullopt;
  return e->view;
}

void* LocalRegistry::sameProcessAddress(const MemoryDescriptor& d, int receiver, const std::string& context) {
  std::optional<internal::LocalMemoryView> view =
      ProcessDirectory::instance().withOwner(d.id, [&](const LocalRegistry* owner) {
        return owner == nullptr ? std::nullopt : owner->matching(d, receiver);
      });
  if (!view) {
    MESHCOMM_THROW(ErrorCode::RemoteError, context, ": the descriptor names this process, but no live ",
                   memoryKindName(d.memoryKind()), " registration of rank ", d.ownerRank, " here has id ",
                   d.id, " and ", d.size, " bytes and was sent to rank ", receiver);
  }
  return view->ptr;
}

// ---- RegistrationLease -------------------------------------------------------------------------------

RegistrationLease::RegistrationLease(RegistrationLease&& other) noexcept
    : registry_(other.registry_),
      id_(other.id_),
      peer_(other.peer_),
      op_(other.op_),
      target_(other.target_),
      kind_(other.kind_) {
  other.registry_ = nullptr;
}

RegistrationLease::~RegistrationLease() {
  if (registry_ != nullptr) registry_->endLease(id_);
}

bool RegistrationLease::revoked() const {
  return registry_ == nullptr || registry_->isRevoked(id_);
}

void RegistrationLease::throwIfRevoked() const {
  if (!revoked()) return;
  MESHCOMM_THROW(ErrorCode::RemoteError, "rank ", registry_ ? registry_->rank() : -1, ": ", op_,
                 " from peer ", peer_, " into memory id ", id_,
                 ": the memory was deregistered during the transfer; the rest is not written");
}

uint64_t LocalRegistry::acquireExport(unsigned long long handle, const std::string& context) {
  const CuDriver& drv = cuDriver();
  const auto h = static_cast<CUmemGenericAllocationHandle>(handle);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exports_.find(handle);
  if (it != exports_.end()) {
    ++it->second.refs;
    drv.cuMemRelease(h);  // the export keeps the first registration's retain
    return it->second.exportId;
  }
  int fd = -1;
  CUresult r = drv.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) {
    drv.cuMemRelease(h);
    if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) {
      MESHCOMM_THROW(
          ErrorCode::InvalidUsage, context,
          ": the memory was allocated by cuMemCreate without POSIX fd handle type, so it cannot be "
          "shared with other processes (set CUmemAllocationProp::requestedHandleTypes to "
          "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, or use GpuBuffer(bytes, GpuMemoryKind::CuMem))");
    }
    throwCuResult(r, (context + ": cuMemExportToShareableHandle(POSIX_FD)").c_str());
  }
  uint64_t exportId = 0;
  try {
    exportId = FdBroker::instance().publish(fd);
  } catch (...) {
    ::close(fd);
    drv.cuMemRelease(h);
    throw;
  }
  ::close(fd);  // the broker holds its own duplicate
  try {
    exports_.emplace(handle, Export{exportId, 1});
  } catch (...) {
    FdBroker::instance().withdraw(exportId);
    drv.cuMemRelease(h);
    throw;
  }
  return exportId;
}

void LocalRegistry::releaseExport(unsigned long long handle) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exports_.find(handle);
  if (it == exports_.end()) return;
  if (--it->second.refs > 0) return;
  FdBroker::instance().withdraw(it->second.exportId);
  try {
    CUresult r = cuDriver().cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle));
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED) {
      MESHCOMM_LOG(WARN, "rank ", rank_, ": cuMemRelease of an exported allocation handle failed (CUresult ",
                   r, ")");
    }
  } catch (...) {
  }
  exports_.erase(it);
}

size_t LocalRegistry::exportCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exports_.size();
}

// ---- registration ------------------------------------------------------------------------------------

std::shared_ptr<RegisteredMemory::Impl> registerLocalMemory(const std::shared_ptr<LocalRegistry>& registry,
                                                            int rank, int device, uint64_t hostId, void* ptr,
                                                            size_t bytes, std::shared_ptr<void> keepAlive) {
  const std::string context =
      detail::concat("rank ", rank, ": registerMemory(ptr=", ptr, ", bytes=", bytes, ")");
  MESHCOMM_REQUIRE(ptr != nullptr, context, ": null pointer");
  MESHCOMM_REQUIRE(bytes > 0, context, ": zero bytes");
  MESHCOMM_REQUIRE(reinterpret_cast<uintptr_t>(ptr) <= UINTPTR_MAX - bytes, context, ": range wraps around");
  if (!registry) MESHCOMM_THROW(ErrorCode::InternalError, context, ": no registry");

  CudaDeviceGuard guard(device);
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    MESHCOMM_THROW(ErrorCode::CudaError, context,
                   ": cudaPointerGetAttributes failed: ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err), ")");
  }

  MemoryDescriptor d = MemoryDescriptor::make();
  d.ownerRank = rank;
  d.deviceIndex = device;
  d.hostId = hostId;
  d.ownerPid = static_cast<uint64_t>(::getpid());
  d.size = bytes;
  bool hasExport = false;
  unsigned long long exportHandle = 0;
  internal::LocalMemoryView view{ptr, bytes, MemoryKind::Host};

  switch (attr.type) {
    case cudaMemoryTypeUnregistered:
      MESHCOMM_THROW(
          ErrorCode::InvalidUsage, context,
          ": pageable host memory (not allocated or registered with CUDA); register device memory, or "
          "pinned host memory from cudaMallocHost/cudaHostAlloc/cudaHostRegister");
    case cudaMemoryTypeManaged:
      MESHCOMM_THROW(
          ErrorCode::InvalidUsage, context,
          ": managed memory (cudaMallocManaged) cannot be shared with peers; use cudaMalloc or cuMem "
          "memory");
    case cudaMemoryTypeHost: {
      cudaPointerAttributes last{};
      err = cudaPointerGetAttributes(&last, static_cast<char*>(ptr) + (bytes - 1));
      if (err != cudaSuccess || last.type != cudaMemoryTypeHost) {
        (void)cudaGetLastError();
        MESHCOMM_THROW(ErrorCode::InvalidUsage, context,
                       ": the range extends past the end of its pinned host allocation");
      }
      d.kind = static_cast<uint8_t>(MemoryKind::Host);
      d.offsetFromBase = 0;
      d.baseSize = bytes;
      d.ownerBase = reinterpret_cast<uintptr_t>(ptr);
      view.kind = MemoryKind::Host;
      break;
    }
    case cudaMemoryTypeDevice: {
      if (attr.device != device) {
        MESHCOMM_THROW(ErrorCode::InvalidUsage, context, ": the memory is on device ", attr.device,
                       " but this communicator uses device ", device);
      }
      const CuDriver& drv = cuDriver();
      CUdeviceptr base = 0;
      size_t baseSize = 0;
      CUresult r = drv.cuMemGetAddressRange(&base, &baseSize, reinterpret_cast<CUdeviceptr>(ptr));
      if (r != CUDA_SUCCESS) throwCuResult(r, (context + ": cuMemGetAddressRange").c_str());
      const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
      if (p < base || p - base > baseSize || bytes > baseSize - (p - base)) {
        MESHCOMM_THROW(ErrorCode::InvalidUsage, context,
                       ": the range extends past the end of its allocation [0x", std::hex, base, ", 0x",
                       base + baseSize, std::dec, ") of ", baseSize,
                       " bytes; register each allocation separately");
      }
      d.offsetFromBase = p - base;
      d.baseSize = baseSize;
      d.ownerBase = base;
      CUmemGenericAllocationHandle handle = 0;
      if (drv.cuMemRetainAllocationHandle(&handle, ptr) == CUDA_SUCCESS) {
        // VMM memory: shared as a POSIX fd through this process's fd broker.
        std::string brokerName;
        try {
          brokerName = FdBroker::instance().name();
          if (brokerName.size() >= sizeof(d.brokerName)) {
            MESHCOMM_THROW(ErrorCode::InternalError, context, ": fd broker name too long");
          }
        } catch (...) {
          drv.cuMemRelease(handle);
          throw;
        }
        d.exportId = registry->acquireExport(handle, context);  // consumes the retain, also when it throws
        hasExport = true;
        exportHandle = handle;
        std::memcpy(d.brokerName, brokerName.data(), brokerName.size());
        d.kind = static_cast<uint8_t>(MemoryKind::DeviceCuMem);
        view.kind = MemoryKind::DeviceCuMem;
      } else {
        err = cudaIpcGetMemHandle(&d.ipcHandle, reinterpret_cast<void*>(base));
        if (err != cudaSuccess) {
          (void)cudaGetLastError();
          MESHCOMM_THROW(
              ErrorCode::CudaError, context, ": cudaIpcGetMemHandle of the allocation base 0x", std::hex,
              base, std::dec, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
              "); memory from cudaMallocAsync/memory pools cannot be shared through CUDA IPC handles");
        }
        d.kind = static_cast<uint8_t>(MemoryKind::DeviceCudaMalloc);
        view.kind = MemoryKind::DeviceCudaMalloc;
      }
      break;
    }
    default:
      MESHCOMM_THROW(ErrorCode::InvalidUsage, context, ": unknown CUDA memory type ",
                     static_cast<int>(attr.type));
  }

  // From here on the Impl owns the export reference and the registry entry.
  std::shared_ptr<RegisteredMemory::Impl> impl;
  try {
    d.id = registry->add(view);
    impl = std::make_shared<RegisteredMemory::Impl>(d, ptr, registry, hasExport, exportHandle,
                                                    std::move(keepAlive));
  } catch (...) {
    if (d.id != 0) registry->remove(d.id);
    if (hasExport) registry->releaseExport(exportHandle);
    throw;
  }
  MESHCOMM_LOG(DEBUG, context, ": registered ", memoryKindName(view.kind), " memory as id ", d.id);
  return impl;
}

// ---- RegisteredMemory::Impl --------------------------------------------------------------------------

RegisteredMemory::Impl::Impl(const MemoryDescriptor& desc, void* ptr, std::shared_ptr<LocalRegistry> registry,
                             bool hasExport, unsigned long long exportHandle, std::shared_ptr<void> keepAlive)
    : desc_(desc),
      local_(true),
      data_(ptr),
      registry_(std::move(registry)),
      hasExport_(hasExport),
      exportHandle_(exportHandle),
      keepAlive_(std::move(keepAlive)) {}

RegisteredMemory::Impl::Impl(const MemoryDescriptor& desc, void* data,
                             std::shared_ptr<const PeerMapping> mapping)
    : desc_(desc), local_(false), data_(data), mapping_(std::move(mapping)) {}

RegisteredMemory::Impl::~Impl() {
  if (local_ && registry_) {
    registry_->remove(desc_.id);
    if (hasExport_) registry_->releaseExport(exportHandle_);
  }
  // mapping_ (remote) releases its import through the cache; keepAlive_ frees owned buffers last.
}

// ---- RegisteredMemory --------------------------------------------------------------------------------

void* RegisteredMemory::data() const {
  return impl_ ? impl_->data() : nullptr;
}
size_t RegisteredMemory::size() const {
  return impl_ ? impl_->size() : 0;
}
int RegisteredMemory::rank() const {
  return impl_ ? impl_->rank() : -1;
}
bool RegisteredMemory::isLocal() const {
  return impl_ && impl_->isLocal();
}
bool RegisteredMemory::isMapped() const {
  return impl_ && impl_->isMapped();
}
uint64_t RegisteredMemory::id() const {
  return impl_ ? impl_->id() : 0;
}

MemoryKind RegisteredMemory::kind() const {
  if (!impl_)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "RegisteredMemory::kind() on an empty RegisteredMemory");
  return impl_->kind();
}

}  // namespace meshcomm
