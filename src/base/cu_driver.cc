#include "base/cu_driver.hpp"

#include <cuda_runtime.h>

#include <mutex>

#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

template <typename Fn>
void resolve(Fn& fn, const char* symbol) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &p, CUDA_VERSION, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    MESHCOMM_THROW(ErrorCode::CudaError, "CUDA driver entry point ", symbol, " is unavailable (",
                   cudaGetErrorString(err), "); is an NVIDIA driver for CUDA ", CUDA_VERSION / 1000, ".",
                   (CUDA_VERSION % 1000) / 10, " installed?");
  }
  fn = reinterpret_cast<Fn>(p);
}

CuDriver load() {
  CuDriver d;
#define MESHCOMM_CU_LOAD(name) resolve(d.name, #name);
  MESHCOMM_CU_LOAD(cuGetErrorString)
  MESHCOMM_CU_LOAD(cuGetErrorName)
  MESHCOMM_CU_LOAD(cuDeviceGet)
  MESHCOMM_CU_LOAD(cuDeviceGetAttribute)
  MESHCOMM_CU_LOAD(cuCtxGetDevice)
  MESHCOMM_CU_LOAD(cuPointerGetAttribute)
  MESHCOMM_CU_LOAD(cuMemGetAddressRange)
  MESHCOMM_CU_LOAD(cuMemCreate)
  MESHCOMM_CU_LOAD(cuMemRelease)
  MESHCOMM_CU_LOAD(cuMemRetainAllocationHandle)
  MESHCOMM_CU_LOAD(cuMemGetAllocationGranularity)
  MESHCOMM_CU_LOAD(cuMemGetAllocationPropertiesFromHandle)
  MESHCOMM_CU_LOAD(cuMemExportToShareableHandle)
  MESHCOMM_CU_LOAD(cuMemImportFromShareableHandle)
  MESHCOMM_CU_LOAD(cuMemAddressReserve)
  MESHCOMM_CU_LOAD(cuMemAddressFree)
  MESHCOMM_CU_LOAD(cuMemMap)
  MESHCOMM_CU_LOAD(cuMemUnmap)
  MESHCOMM_CU_LOAD(cuMemSetAccess)
  MESHCOMM_CU_LOAD(cuStreamWriteValue64)
  MESHCOMM_CU_LOAD(cuModuleGetLoadingMode)
  MESHCOMM_CU_LOAD(cuKernelGetLibrary)
  MESHCOMM_CU_LOAD(cuKernelGetFunction)
  MESHCOMM_CU_LOAD(cuLibraryGetKernelCount)
  MESHCOMM_CU_LOAD(cuLibraryEnumerateKernels)
#undef MESHCOMM_CU_LOAD
  return d;
}

}  // namespace

const CuDriver& cuDriver() {
  // Initialise the runtime (and through it the driver) before resolving entry points.
  static const CuDriver driver = [] {
    MESHCOMM_CUDA_CHECK(cudaFree(nullptr));
    return load();
  }();
  return driver;
}

void throwCuResult(CUresult result, const char* what) {
  const char* name = nullptr;
  const char* text = nullptr;
  const CuDriver& d = cuDriver();
  if (d.cuGetErrorName) d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(result, &text);
  MESHCOMM_THROW(ErrorCode::CudaError, what, " failed: ", name ? name : "?", " (", text ? text : "?", ")");
}

}  // namespace meshcomm
