// Window kernels (window_kernels.cuh).
#include <algorithm>

#include "collectives/window_kernels.cuh"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/errors.hpp"
#include "base/kernel_modules.hpp"

namespace meshcomm::window {

namespace {

constexpr int kPutThreads = 512;
constexpr int kPutMaxBlocks = 32;  // enough to saturate one NVLink peer
constexpr size_t kPutBytesPerBlock = 64 << 10;

// Memory order: weak stores into the peer's window; published by a later signal on the same stream.
__global__ void putKernel(void* dst, const void* src, uint64_t bytes) {
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  device::copy(dst, src, bytes, tid, gridDim.x * blockDim.x);
}

// Memory order: release at system scope; the stream ordered every earlier kernel and copy before it.
__global__ void signalKernel(MemoryDevice2DeviceSemaphoreDeviceHandle semaphore) {
  semaphore.signal();
}

// Memory order: acquire at system scope; later work on the stream sees the signaller's published writes.
__global__ void waitKernel(MemoryDevice2DeviceSemaphoreDeviceHandle semaphore) {
  semaphore.wait();
}

}  // namespace

void launchPut(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  const int blocks =
      static_cast<int>(std::min<size_t>(kPutMaxBlocks, (bytes + kPutBytesPerBlock - 1) / kPutBytesPerBlock));
  putKernel<<<blocks, kPutThreads, 0, stream>>>(dst, src, bytes);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchSignal(const MemoryDevice2DeviceSemaphoreDeviceHandle& semaphore, cudaStream_t stream) {
  signalKernel<<<1, 1, 0, stream>>>(semaphore);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchWait(const MemoryDevice2DeviceSemaphoreDeviceHandle& semaphore, cudaStream_t stream) {
  waitKernel<<<1, 1, 0, stream>>>(semaphore);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::window

MESHCOMM_KERNEL_MODULE()
