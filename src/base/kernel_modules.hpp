// Kernel preloading under CUDA lazy loading.
//
// With lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) the first launch of a kernel
// loads it, and loading synchronizes the context: the launch waits for the kernels already running on the
// device, and work other threads enqueue meanwhile waits behind it. A kernel that waits on a host proxy
// (PortChannel: the proxy's copies and signals are stream work) then deadlocks with any first-time launch
// of the same process until its device timeout. Every .cu translation unit of libmeshcomm therefore
// registers its module (MESHCOMM_KERNEL_MODULE(), checked at configure time), and each Communicator loads
// all their kernels into its device's context once, before any of them can run.
#pragma once

namespace meshcomm::internal {

// Records the module (CUDA library) holding `anchorKernel`. Called by MESHCOMM_KERNEL_MODULE() during
// static initialisation; always returns true.
bool registerKernelModule(const void* anchorKernel);

// Loads every kernel of every registered module into `cudaDevice`'s primary context, once per device per
// process (later calls return at once). Thread-safe. Throws Error(CudaError) on a driver failure.
void loadRegisteredKernelModules(int cudaDevice);

// True when the driver loads kernels lazily (cuModuleGetLoadingMode).
bool lazyKernelLoading();

}  // namespace meshcomm::internal

// One line in every .cu file of libmeshcomm: an empty anchor kernel of the translation unit's module and
// its registration, so that loadRegisteredKernelModules() loads all the unit's kernels.
#define MESHCOMM_KERNEL_MODULE()                                                                           \
  namespace {                                                                                              \
  __global__ void meshcommKernelModuleAnchor() {}                                                          \
  [[maybe_unused]] const bool meshcommKernelModuleRegistered = ::meshcomm::internal::registerKernelModule( \
      reinterpret_cast<const void*>(&meshcommKernelModuleAnchor));                                         \
  }
