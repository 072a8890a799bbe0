// CUDA helpers for users and for meshcomm itself: device guard, owning device/host-mapped buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meshcomm {

// Number of CUDA devices; 0 (never an exception) where there is no driver or no device.
int gpuCount();

// Sets the current device for its lifetime and restores the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Copies `bytes` of host memory to device memory and returns once the device holds them, so that work
// enqueued afterwards on any stream reads them: cudaMemcpy from pageable memory returns once the data is
// staged, before its DMA lands, and work on a non-blocking stream does not wait for the legacy stream. The
// copy runs on a private non-blocking stream, so no other work is waited for.
void copyToDevice(void* dst, const void* src, size_t bytes);

// Loads every kernel of the CUDA module holding `kernel` (a __global__ function of this process's CUDA
// runtime; without relocatable device code a module is one .cu translation unit) into the current device's
// context and returns the number of kernels loaded. Under CUDA lazy loading (CUDA_MODULE_LOADING=LAZY, the
// default) a kernel's first launch synchronizes the context: it waits for every running kernel, and work
// that other threads enqueue meanwhile, PortChannel proxies' copies and signals included, waits behind it.
// Load a module before launching a kernel that waits on a PortChannel when kernels of that module are
// launched after it. meshcomm's own kernels are loaded by every Communicator. Throws Error(CudaError).
unsigned loadKernelModuleOf(const void* kernel);

enum class GpuMemoryKind {
  CudaMalloc,  // cudaMalloc: shared with peers through cudaIpc handles
  CuMem,       // cuMemCreate (VMM) with POSIX-fd export: shared as file descriptors over a unix socket
};

// Owning, zero-initialised device allocation on the current device.
class GpuBuffer {
 public:
  GpuBuffer() = default;
  explicit GpuBuffer(size_t bytes, GpuMemoryKind kind = GpuMemoryKind::CudaMalloc);
  ~GpuBuffer();
  GpuBuffer(GpuBuffer&& other) noexcept;
  GpuBuffer& operator=(GpuBuffer&& other) noexcept;
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  GpuMemoryKind kind() const { return kind_; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  size_t mappedBytes_ = 0;         // CuMem: granularity-rounded size
  unsigned long long handle_ = 0;  // CuMem: CUmemGenericAllocationHandle
  GpuMemoryKind kind_ = GpuMemoryKind::CudaMalloc;
  int device_ = -1;
};

// Owning, zero-initialised pinned host allocation mapped into the device address space.
class HostMappedBuffer {
 public:
  HostMappedBuffer() = default;
  explicit HostMappedBuffer(size_t bytes);
  ~HostMappedBuffer();
  HostMappedBuffer(HostMappedBuffer&& other) noexcept;
  HostMappedBuffer& operator=(HostMappedBuffer&& other) noexcept;
  HostMappedBuffer(const HostMappedBuffer&) = delete;
  HostMappedBuffer& operator=(const HostMappedBuffer&) = delete;

  void* host() const { return host_; }
  void* device() const { return device_; }
  size_t size() const { return bytes_; }

 private:
  void* host_ = nullptr;
  void* device_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace meshcomm
