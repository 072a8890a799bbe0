#include "core/peer_mapping_cache.hpp"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "core/fd_broker.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

namespace {

template <typename T>
void appendBytes(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string cacheKey(const MemoryDescriptor& d, int localDevice) {
  std::string key;
  appendBytes(key, d.hostId);
  appendBytes(key, d.ownerPid);
  appendBytes(key, localDevice);
  appendBytes(key, d.kind);
  if (d.memoryKind() == MemoryKind::DeviceCuMem) {
    appendBytes(key, d.exportId);
    key.append(d.brokerName, strnlen(d.brokerName, sizeof(d.brokerName)));
  } else {
    key.append(d.ipcHandle.reserved, sizeof(d.ipcHandle.reserved));
  }
  return key;
}

std::string ownerText(const MemoryDescriptor& d) {
  return detail::concat("rank ", d.ownerRank, "'s ", memoryKindName(d.memoryKind()), " allocation (",
                        d.baseSize, " bytes on its device ", d.deviceIndex, ", pid ", d.ownerPid, ")");
}

[[noreturn]] void throwCu(CUresult r, const std::string& what) {
  throwCuResult(r, what.c_str());
}

// The descriptor's allocation size comes from the peer: it must not exceed what the handle mapped here, or
// offsets checked against it could reach past the mapping. Unmaps `mapped` before throwing.
void requireMappedSize(void* mapped, const MemoryDescriptor& d, const std::string& context) {
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult r = cuDriver().cuMemGetAddressRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(mapped));
  if (r == CUDA_SUCCESS && d.baseSize <= bytes) return;
  (void)cudaIpcCloseMemHandle(mapped);
  if (r != CUDA_SUCCESS) throwCu(r, detail::concat(context, ": cuMemGetAddressRange of ", ownerText(d)));
  MESHCOMM_THROW(ErrorCode::RemoteError, context, ": rank ", d.ownerRank, " describes an allocation of ",
                 d.baseSize, " bytes (memory id ", d.id, "), but its CUDA IPC handle maps ", bytes,
                 " bytes here");
}

std::unique_ptr<PeerMapping> importCudaIpc(const MemoryDescriptor& d, int localDevice,
                                           const std::string& context) {
  CudaDeviceGuard guard(localDevice);
  void* p = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&p, d.ipcHandle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    MESHCOMM_THROW(ErrorCode::CudaError, context, ": cudaIpcOpenMemHandle of ", ownerText(d),
                   " on local device ", localDevice, " failed: ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err),
                   "); peer access between the devices may be unavailable, or the processes may not share "
                   "CUDA IPC (containers); MESHCOMM_TRANSPORT=tcp avoids CUDA IPC");
  }
  requireMappedSize(p, d, context);
  auto m = std::make_unique<PeerMapping>();
  m->type = PeerMapping::Type::CudaIpc;
  m->base = p;
  m->mappedSize = static_cast<size_t>(d.baseSize);
  m->localDevice = localDevice;
  return m;
}

std::unique_ptr<PeerMapping> importCuMem(const MemoryDescriptor& d, int localDevice, double fetchTimeoutSec,
                                         const std::string& context) {
  const CuDriver& drv = cuDriver();
  const std::string brokerName(d.brokerName, strnlen(d.brokerName, sizeof(d.brokerName)));
  int fd = -1;
  try {
    fd = FdBroker::fetch(brokerName, d.exportId, fetchTimeoutSec);
  } catch (const Error& e) {
    const bool released = std::string(e.what()).find("not found") != std::string::npos;
    throw Error(e.code(),
                detail::concat(context, ": importing ", ownerText(d), ": ", e.what(),
                               released ? "; the owner must keep its RegisteredMemory alive until the "
                                          "peer's recvMemory has returned"
                                        : ""));
  }

  CudaDeviceGuard guard(localDevice);
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = drv.cuMemImportFromShareableHandle(
      &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ::close(fd);  // the imported handle holds its own reference
  if (r != CUDA_SUCCESS)
    throwCu(r, detail::concat(context, ": cuMemImportFromShareableHandle of ", ownerText(d)));

  CUdevice cuDev = 0;
  size_t granularity = 0;
  CUdeviceptr va = 0;
  size_t reserved = 0;
  const size_t mapped = static_cast<size_t>(d.baseSize);
  bool reservedVa = false, mappedVa = false;
  try {
    MESHCOMM_CU(cuDeviceGet, &cuDev, localDevice);
    // Granularity of this device (the owner's ordinal may mean nothing here); the owner's size is already a
    // multiple of its own granularity, which cuMemMap checks.
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = cuDev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    MESHCOMM_CU(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (granularity == 0) granularity = 2u << 20;
    reserved = (mapped + granularity - 1) / granularity * granularity;
    r = drv.cuMemAddressReserve(&va, reserved, granularity, 0, 0);
    if (r != CUDA_SUCCESS)
      throwCu(r, detail::concat(context, ": cuMemAddressReserve of ", reserved, " bytes"));
    reservedVa = true;
    r = drv.cuMemMap(va, mapped, 0, handle, 0);
    if (r != CUDA_SUCCESS) throwCu(r, detail::concat(context, ": cuMemMap of ", ownerText(d)));
    mappedVa = true;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = cuDev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = drv.cuMemSetAccess(va, mapped, &access, 1);
    if (r != CUDA_SUCCESS) {
      throwCu(r, detail::concat(context, ": cuMemSetAccess (read-write for local device ", localDevice,
                                ") on ", ownerText(d), "; is peer access between the devices possible?"));
    }
  } catch (...) {
    if (mappedVa) drv.cuMemUnmap(va, mapped);
    if (reservedVa) drv.cuMemAddressFree(va, reserved);
    drv.cuMemRelease(handle);
    throw;
  }
  auto m = std::make_unique<PeerMapping>();
  m->type = PeerMapping::Type::CuMem;
  m->base = reinterpret_cast<void*>(va);
  m->mappedSize = mapped;
  m->reservedSize = reserved;
  m->handle = handle;
  m->localDevice = localDevice;
  return m;
}

void unmap(const PeerMapping& m) noexcept {
  try {
    if (m.type == PeerMapping::Type::CudaIpc) {
      CudaDeviceGuard guard(m.localDevice);
      cudaError_t err = cudaIpcCloseMemHandle(m.base);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        if (err != cudaErrorCudartUnloading) {
          MESHCOMM_LOG(WARN, "peer mapping: cudaIpcCloseMemHandle(", m.base,
                       ") failed: ", cudaGetErrorString(err));
        }
      }
    } else {
      const CuDriver& drv = cuDriver();
      auto va = reinterpret_cast<CUdeviceptr>(m.base);
      CUresult r1 = drv.cuMemUnmap(va, m.mappedSize);
      CUresult r2 = drv.cuMemAddressFree(va, m.reservedSize);
      CUresult r3 = drv.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(m.handle));
      if ((r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS || r3 != CUDA_SUCCESS) &&
          r1 != CUDA_ERROR_DEINITIALIZED) {
        MESHCOMM_LOG(WARN, "peer mapping: releasing the cuMem import at ", m.base, " failed (unmap ", r1,
                     ", address free ", r2, ", release ", r3, ")");
      }
    }
  } catch (...) {
    // never throws out of a release
  }
}

}  // namespace

class PeerMappingCache::Releaser {
 public:
  Releaser(PeerMappingCache* cache, std::string key) : cache_(cache), key_(std::move(key)) {}
  void operator()(const PeerMapping*) noexcept { cache_->release(key_); }

 private:
  PeerMappingCache* cache_;
  std::string key_;
};

PeerMappingCache& PeerMappingCache::instance() {
  static PeerMappingCache* cache = new PeerMappingCache();
  return *cache;
}

std::shared_ptr<const PeerMapping> PeerMappingCache::acquire(const MemoryDescriptor& desc, int localDevice,
                                                             double fetchTimeoutSec,
                                                             const std::string& context) {
  const MemoryKind kind = desc.memoryKind();
  if (kind != MemoryKind::DeviceCudaMalloc && kind != MemoryKind::DeviceCuMem) {
    MESHCOMM_THROW(ErrorCode::InternalError, context, ": cannot map ", memoryKindName(kind),
                   " memory of rank ", desc.ownerRank);
  }
  std::string key = cacheKey(desc, localDevice);
  Releaser releaser(this, key);  // built before the reference is taken, so that nothing can throw in between
  const PeerMapping* mapping = nullptr;
  bool imported = false;
  {
    // Imports happen under the lock: one import per key, and no release can interleave with it. Imports are
    // setup-time operations; the only slow step (fetching an fd) is bounded by fetchTimeoutSec.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      std::unique_ptr<PeerMapping> m = kind == MemoryKind::DeviceCudaMalloc
                                           ? importCudaIpc(desc, localDevice, context)
                                           : importCuMem(desc, localDevice, fetchTimeoutSec, context);
      try {
        it = entries_.try_emplace(key).first;
      } catch (...) {
        unmap(*m);
        throw;
      }
      it->second.mapping = std::move(m);
      imported = true;
    } else if (it->second.mapping->mappedSize != desc.baseSize) {
      MESHCOMM_THROW(ErrorCode::RemoteError, context, ": rank ", desc.ownerRank,
                     " describes an allocation of ", desc.baseSize,
                     " bytes that is already mapped here with ", it->second.mapping->mappedSize, " bytes");
    }
    ++it->second.refs;
    mapping = it->second.mapping.get();
  }
  // Outside the lock: if the shared_ptr cannot be built, it calls the releaser, which takes the lock.
  std::shared_ptr<const PeerMapping> out(mapping, std::move(releaser));
  if (imported) MESHCOMM_LOG(DEBUG, context, ": mapped ", ownerText(desc), " at ", mapping->base);
  return out;
}

void PeerMappingCache::release(const std::string& key) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  if (--it->second.refs > 0) return;
  unmap(*it->second.mapping);
  entries_.erase(it);
}

size_t PeerMappingCache::liveMappings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void enablePeerAccess(int localDevice, int ownerDevice, const std::string& context) {
  if (localDevice == ownerDevice) return;
  int can = 0;
  MESHCOMM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, localDevice, ownerDevice));
  if (!can) {
    MESHCOMM_THROW(ErrorCode::CudaError, context, ": device ", localDevice, " cannot access device ",
                   ownerDevice, " (no peer access); use MESHCOMM_TRANSPORT=tcp");
  }
  CudaDeviceGuard guard(localDevice);
  cudaError_t err = cudaDeviceEnablePeerAccess(ownerDevice, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    MESHCOMM_THROW(ErrorCode::CudaError, context, ": cudaDeviceEnablePeerAccess(", ownerDevice,
                   ") on device ", localDevice, " failed: ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err), ")");
  }
}

}  // namespace meshcomm
