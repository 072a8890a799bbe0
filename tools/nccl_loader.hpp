// Run-time binding to NCCL for meshcomm-bench --compare nccl (and meshcomm-tune): dlopen("libnccl.so.2")
// (or the path in MESHCOMM_BENCH_NCCL_LIB, a tool-only variable) and resolve the few C API functions the
// tools use. The declarations below are our own minimal copy of NCCL 2.x's stable ABI (opaque comm
// handle, 128-byte unique id, enum values), so nothing here needs nccl.h at build time.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace meshcomm::tools {

namespace nccl {
using Comm = struct OpaqueComm*;  // ncclComm_t
struct UniqueId {                 // ncclUniqueId
  char internal[128];
};
using Result = int;  // ncclResult_t: 0 = ncclSuccess
// ncclDataType_t (NCCL 2.x)
enum DataType : int {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bfloat16 = 9,
  Float8e4m3 = 10,  // NCCL >= 2.24
  Float8e5m2 = 11,  // NCCL >= 2.24
};
// ncclRedOp_t
enum RedOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4 };
}  // namespace nccl

// The resolved entry points. load() throws std::runtime_error with a clear message when NCCL cannot be
// loaded ("--compare nccl needs libnccl.so.2 ...").
struct NcclApi {
  nccl::Result (*getVersion)(int*) = nullptr;
  nccl::Result (*getUniqueId)(nccl::UniqueId*) = nullptr;
  nccl::Result (*commInitRank)(nccl::Comm*, int, nccl::UniqueId, int) = nullptr;
  nccl::Result (*commDestroy)(nccl::Comm) = nullptr;
  const char* (*getErrorString)(nccl::Result) = nullptr;
  nccl::Result (*allReduce)(const void*, void*, size_t, nccl::DataType, nccl::RedOp, nccl::Comm,
                            cudaStream_t) = nullptr;
  nccl::Result (*allGather)(const void*, void*, size_t, nccl::DataType, nccl::Comm, cudaStream_t) = nullptr;
  nccl::Result (*reduceScatter)(const void*, void*, size_t, nccl::DataType, nccl::RedOp, nccl::Comm,
                                cudaStream_t) = nullptr;
  nccl::Result (*broadcast)(const void*, void*, size_t, nccl::DataType, int, nccl::Comm,
                            cudaStream_t) = nullptr;
  nccl::Result (*reduce)(const void*, void*, size_t, nccl::DataType, nccl::RedOp, int, nccl::Comm,
                         cudaStream_t) = nullptr;
  nccl::Result (*send)(const void*, size_t, nccl::DataType, int, nccl::Comm, cudaStream_t) = nullptr;
  nccl::Result (*recv)(void*, size_t, nccl::DataType, int, nccl::Comm, cudaStream_t) = nullptr;
  nccl::Result (*groupStart)() = nullptr;
  nccl::Result (*groupEnd)() = nullptr;
  // Optional (NCCL >= 2.11): premulsum ops.
  nccl::Result (*redOpCreatePreMulSum)(nccl::RedOp*, void*, nccl::DataType, int, nccl::Comm) = nullptr;
  nccl::Result (*redOpDestroy)(nccl::RedOp, nccl::Comm) = nullptr;

  std::string path;  // what was loaded
  int version = 0;   // ncclGetVersion: e.g. 22703 for 2.27.3

  static NcclApi load();
  // Throws std::runtime_error("nccl<what> failed: <ncclGetErrorString>") unless r == 0.
  void check(nccl::Result r, const char* what) const;
  std::string versionString() const;
};

// The library name or path load() opens (MESHCOMM_BENCH_NCCL_LIB, else "libnccl.so.2").
std::string ncclLibraryPath();

}  // namespace meshcomm::tools
