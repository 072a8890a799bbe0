// Kernels of Window (window.cc): a put is a grid-wide weak copy; signal and wait run one thread on one peer's
// semaphore. Separate launches on one stream are ordered by the stream: a signal kernel starts after the
// puts before it have completed, and its release covers their writes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "meshcomm/device/semaphore_device.hpp"

namespace meshcomm::window {

// Weak copy of `bytes` from `src` to `dst` (a peer's mapped window) by every thread of a grid sized for it.
void launchPut(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// One release signal on `semaphore` (its remote token: the peer's, or this rank's own for a self signal).
void launchSignal(const MemoryDevice2DeviceSemaphoreDeviceHandle& semaphore, cudaStream_t stream);
// One acquire wait on `semaphore`'s local token (bounded by the spin timeout; a timeout is reported through
// the semaphore's SpinContext and the kernel ends).
void launchWait(const MemoryDevice2DeviceSemaphoreDeviceHandle& semaphore, cudaStream_t stream);

}  // namespace meshcomm::window
