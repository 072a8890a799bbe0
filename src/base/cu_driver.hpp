// CUDA driver entry points, resolved at run time through cudaGetDriverEntryPointByVersion so that
// libmeshcomm has no link-time dependency on libcuda (it loads on machines without a driver).
#pragma once

#include <cuda.h>

namespace meshcomm {

struct CuDriver {
#define MESHCOMM_CU_FN(name) decltype(&::name) name = nullptr;
  MESHCOMM_CU_FN(cuGetErrorString)
  MESHCOMM_CU_FN(cuGetErrorName)
  MESHCOMM_CU_FN(cuDeviceGet)
  MESHCOMM_CU_FN(cuDeviceGetAttribute)
  MESHCOMM_CU_FN(cuCtxGetDevice)
  MESHCOMM_CU_FN(cuPointerGetAttribute)
  MESHCOMM_CU_FN(cuMemGetAddressRange)
  MESHCOMM_CU_FN(cuMemCreate)
  MESHCOMM_CU_FN(cuMemRelease)
  MESHCOMM_CU_FN(cuMemRetainAllocationHandle)
  MESHCOMM_CU_FN(cuMemGetAllocationGranularity)
  MESHCOMM_CU_FN(cuMemGetAllocationPropertiesFromHandle)
  MESHCOMM_CU_FN(cuMemExportToShareableHandle)
  MESHCOMM_CU_FN(cuMemImportFromShareableHandle)
  MESHCOMM_CU_FN(cuMemAddressReserve)
  MESHCOMM_CU_FN(cuMemAddressFree)
  MESHCOMM_CU_FN(cuMemMap)
  MESHCOMM_CU_FN(cuMemUnmap)
  MESHCOMM_CU_FN(cuMemSetAccess)
  MESHCOMM_CU_FN(cuStreamWriteValue64)
  MESHCOMM_CU_FN(cuModuleGetLoadingMode)
  MESHCOMM_CU_FN(cuKernelGetLibrary)
  MESHCOMM_CU_FN(cuKernelGetFunction)
  MESHCOMM_CU_FN(cuLibraryGetKernelCount)
  MESHCOMM_CU_FN(cuLibraryEnumerateKernels)
#undef MESHCOMM_CU_FN
};

// The table, loaded on first use. Throws Error(CudaError) if the driver or an entry point is missing.
const CuDriver& cuDriver();

// Throws Error(CudaError) with the driver's name and text for `result`, prefixed by `what`.
[[noreturn]] void throwCuResult(CUresult result, const char* what);

}  // namespace meshcomm

// Calls a driver entry point and throws on failure: MESHCOMM_CU(cuMemMap, ptr, size, 0, handle, 0).
#define MESHCOMM_CU(fn, ...)                                                                \
  do {                                                                                      \
    CUresult meshcomm_cu_res_ = ::meshcomm::cuDriver().fn(__VA_ARGS__);                     \
    if (meshcomm_cu_res_ != CUDA_SUCCESS) ::meshcomm::throwCuResult(meshcomm_cu_res_, #fn); \
  } while (0)
