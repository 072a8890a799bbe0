#include "base/kernel_modules.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <mutex>
#include <set>
#include <vector>

#include "base/cu_driver.hpp"
#include "base/logging.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

namespace {

struct ModuleRegistry {
  std::mutex mutex;
  std::vector<const void*> anchors;  // one kernel per registered module
  std::set<int> loadedDevices;
};

ModuleRegistry& registry() {
  static ModuleRegistry* r = new ModuleRegistry();  // never destroyed: static initialisers register into it
  return *r;
}

}  // namespace

unsigned loadKernelModuleOf(const void* kernel) {
  MESHCOMM_REQUIRE(kernel != nullptr, "loadKernelModuleOf: null kernel");
  cudaKernel_t handle = nullptr;
  MESHCOMM_CUDA_CHECK(cudaGetKernel(&handle, kernel));
  CUlibrary library = nullptr;
  MESHCOMM_CU(cuKernelGetLibrary, &library, reinterpret_cast<CUkernel>(handle));
  unsigned count = 0;
  MESHCOMM_CU(cuLibraryGetKernelCount, &count, library);
  std::vector<CUkernel> kernels(count);
  if (count > 0) MESHCOMM_CU(cuLibraryEnumerateKernels, kernels.data(), count, library);
  for (CUkernel k : kernels) {
    CUfunction function = nullptr;  // getting the function loads the kernel into the current context
    MESHCOMM_CU(cuKernelGetFunction, &function, k);
  }
  return count;
}

namespace internal {

bool registerKernelModule(const void* anchorKernel) {
  ModuleRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.anchors.push_back(anchorKernel);
  return true;
}

void loadRegisteredKernelModules(int cudaDevice) {
  ModuleRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.loadedDevices.count(cudaDevice) != 0) return;
  CudaDeviceGuard guard(cudaDevice);
  const auto begin = std::chrono::steady_clock::now();
  unsigned kernels = 0;
  for (const void* anchor : r.anchors) kernels += loadKernelModuleOf(anchor);
  r.loadedDevices.insert(cudaDevice);
  MESHCOMM_LOG(DEBUG, "device ", cudaDevice, ": loaded ", kernels, " kernels of ", r.anchors.size(),
               " modules in ",
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count(),
               " ms", lazyKernelLoading() ? " (lazy loading is on)" : "");
}

bool lazyKernelLoading() {
  CUmoduleLoadingMode mode{};
  MESHCOMM_CU(cuModuleGetLoadingMode, &mode);
  return mode == CU_MODULE_LAZY_LOADING;
}

}  // namespace internal
}  // namespace meshcomm
