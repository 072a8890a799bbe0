// CUDA helpers: device count, device guard, owning device (cudaMalloc / cuMem) and host-mapped buffers.
#include "meshcomm/gpu_utils.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <utility>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

// Runs enqueue(stream) on a private non-blocking stream and waits for it: no other stream's work is waited
// for (the legacy stream would serialise with every blocking stream).
template <class Enqueue>
void runOnPrivateStream(Enqueue&& enqueue) {
  cudaStream_t stream = nullptr;
  MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaError_t err = enqueue(stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  cudaError_t destroyErr = cudaStreamDestroy(stream);
  MESHCOMM_CUDA_CHECK(err);
  MESHCOMM_CUDA_CHECK(destroyErr);
}

// Zeroes device memory and waits for it (cudaMemset on the legacy stream would be asynchronous).
void zeroDeviceMemory(void* ptr, size_t bytes) {
  runOnPrivateStream([&](cudaStream_t s) { return cudaMemsetAsync(ptr, 0, bytes, s); });
}

size_t roundUp(size_t x, size_t to) {
  return (x + to - 1) / to * to;
}

}  // namespace

void copyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  runOnPrivateStream(
      [&](cudaStream_t s) { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s); });
}

int gpuCount() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky, but leave no stale "last error" behind
    return 0;
  }
  return n < 0 ? 0 : n;
}

// ---- CudaDeviceGuard ---------------------------------------------------------------------------------

CudaDeviceGuard::CudaDeviceGuard(int device) {
  if (device < 0) return;  // "keep the current device"
  int current = -1;
  MESHCOMM_CUDA_CHECK(cudaGetDevice(&current));
  // Always set it: cudaSetDevice also makes the device's primary context current on this thread, which the
  // driver calls made under the guard (cuMem*) need even when the device number does not change.
  MESHCOMM_CUDA_CHECK(cudaSetDevice(device));
  if (current != device) previous_ = current;
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ < 0) return;
  cudaError_t err = cudaSetDevice(previous_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    try {
      MESHCOMM_LOG(WARN, "CudaDeviceGuard: restoring device ", previous_,
                   " failed: ", cudaGetErrorString(err));
    } catch (...) {
    }
  }
}

// ---- GpuBuffer ---------------------------------------------------------------------------------------

GpuBuffer::GpuBuffer(size_t bytes, GpuMemoryKind kind) : bytes_(bytes), kind_(kind) {
  MESHCOMM_CUDA_CHECK(cudaGetDevice(&device_));
  if (bytes == 0) return;
  if (kind == GpuMemoryKind::CudaMalloc) {
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      MESHCOMM_THROW(ErrorCode::CudaError, "GpuBuffer: cudaMalloc of ", bytes, " bytes on device ", device_,
                     " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
    }
    ptr_ = p;
    mappedBytes_ = bytes;
    try {
      zeroDeviceMemory(ptr_, bytes);
    } catch (...) {
      release();
      throw;
    }
    return;
  }

  // cuMem (VMM): exportable as a POSIX fd.
  CudaDeviceGuard guard(device_);  // makes the primary context current for the driver calls below
  const CuDriver& d = cuDriver();
  CUdevice cuDev = 0;
  MESHCOMM_CU(cuDeviceGet, &cuDev, device_);
  int vmm = 0;
  MESHCOMM_CU(cuDeviceGetAttribute, &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cuDev);
  if (!vmm) {
    MESHCOMM_THROW(
        ErrorCode::CudaError, "GpuBuffer: device ", device_,
        " does not support virtual memory management (cuMemCreate); use GpuMemoryKind::CudaMalloc");
  }
  int rdma = 0;
  if (d.cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, cuDev) !=
      CUDA_SUCCESS) {
    rdma = 0;
  }

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = cuDev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  size_t granularity = 0;
  MESHCOMM_CU(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (granularity == 0) granularity = 2u << 20;
  const size_t mapped = roundUp(bytes, granularity);

  CUmemGenericAllocationHandle handle = 0;
  CUresult res = d.cuMemCreate(&handle, mapped, &prop, 0);
  if (res != CUDA_SUCCESS) {
    throwCuResult(res,
                  detail::concat("GpuBuffer: cuMemCreate of ", mapped, " bytes on device ", device_).c_str());
  }
  CUdeviceptr va = 0;
  res = d.cuMemAddressReserve(&va, mapped, granularity, 0, 0);
  if (res != CUDA_SUCCESS) {
    d.cuMemRelease(handle);
    throwCuResult(res, "GpuBuffer: cuMemAddressReserve");
  }
  res = d.cuMemMap(va, mapped, 0, handle, 0);
  if (res != CUDA_SUCCESS) {
    d.cuMemAddressFree(va, mapped);
    d.cuMemRelease(handle);
    throwCuResult(res, "GpuBuffer: cuMemMap");
  }
  // From here on release() undoes everything.
  ptr_ = reinterpret_cast<void*>(va);
  mappedBytes_ = mapped;
  handle_ = handle;
  try {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = cuDev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    MESHCOMM_CU(cuMemSetAccess, va, mapped, &access, 1);
    zeroDeviceMemory(ptr_, mapped);
  } catch (...) {
    release();
    throw;
  }
}

void GpuBuffer::release() noexcept {
  if (ptr_ == nullptr) return;
  try {
    if (kind_ == GpuMemoryKind::CudaMalloc) {
      cudaError_t err = cudaFree(ptr_);
      if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
        (void)cudaGetLastError();
        MESHCOMM_LOG(WARN, "GpuBuffer: cudaFree(", ptr_, ") failed: ", cudaGetErrorString(err));
      }
    } else {
      const CuDriver& d = cuDriver();
      auto va = reinterpret_cast<CUdeviceptr>(ptr_);
      CUresult r1 = d.cuMemUnmap(va, mappedBytes_);
      CUresult r2 = d.cuMemAddressFree(va, mappedBytes_);
      CUresult r3 = d.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(handle_));
      if ((r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS || r3 != CUDA_SUCCESS) &&
          r1 != CUDA_ERROR_DEINITIALIZED) {
        MESHCOMM_LOG(WARN, "GpuBuffer: releasing cuMem buffer ", ptr_, " failed (unmap ", r1,
                     ", address free ", r2, ", release ", r3, ")");
      }
    }
  } catch (...) {
    // Destructors never throw; a missing driver here means the memory is already gone.
  }
  ptr_ = nullptr;
  bytes_ = 0;
  mappedBytes_ = 0;
  handle_ = 0;
}

GpuBuffer::~GpuBuffer() {
  release();
}

GpuBuffer::GpuBuffer(GpuBuffer&& other) noexcept {
  *this = std::move(other);
}

GpuBuffer& GpuBuffer::operator=(GpuBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mappedBytes_ = std::exchange(other.mappedBytes_, 0);
    handle_ = std::exchange(other.handle_, 0);
    kind_ = other.kind_;
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

// ---- HostMappedBuffer --------------------------------------------------------------------------------

HostMappedBuffer::HostMappedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* h = nullptr;
  cudaError_t err = cudaHostAlloc(&h, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    MESHCOMM_THROW(ErrorCode::CudaError, "HostMappedBuffer: cudaHostAlloc of ", bytes,
                   " bytes failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  }
  void* dev = nullptr;
  err = cudaHostGetDevicePointer(&dev, h, 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFreeHost(h);
    MESHCOMM_THROW(ErrorCode::CudaError,
                   "HostMappedBuffer: cudaHostGetDevicePointer failed: ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err), ")");
  }
  std::memset(h, 0, bytes);
  host_ = h;
  device_ = dev;
}

HostMappedBuffer::~HostMappedBuffer() {
  if (host_ == nullptr) return;
  cudaError_t err = cudaFreeHost(host_);
  if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
    (void)cudaGetLastError();
    try {
      MESHCOMM_LOG(WARN, "HostMappedBuffer: cudaFreeHost(", host_, ") failed: ", cudaGetErrorString(err));
    } catch (...) {
    }
  }
}

HostMappedBuffer::HostMappedBuffer(HostMappedBuffer&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)),
      device_(std::exchange(other.device_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

HostMappedBuffer& HostMappedBuffer::operator=(HostMappedBuffer&& other) noexcept {
  if (this != &other) {
    HostMappedBuffer old(std::move(*this));  // frees the current allocation at scope exit
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

}  // namespace meshcomm
