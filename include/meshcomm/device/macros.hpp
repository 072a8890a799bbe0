// Qualifiers shared by the device headers. Struct layouts are visible to host code; device functions
// exist only when compiled by nvcc.
#pragma once

#if defined(__CUDACC__)
#define MESHCOMM_DEVICE_INLINE __device__ __forceinline__
#define MESHCOMM_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define MESHCOMM_HOST_DEVICE_INLINE inline
#endif
