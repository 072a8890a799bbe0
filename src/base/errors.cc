#include "meshcomm/errors.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>

namespace meshcomm {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidUsage:
      return "invalid usage";
    case ErrorCode::SystemError:
      return "system error";
    case ErrorCode::CudaError:
      return "CUDA error";
    case ErrorCode::Timeout:
      return "timeout";
    case ErrorCode::RemoteError:
      return "remote error";
    case ErrorCode::InternalError:
      return "internal error";
  }
  return "unknown error";
}

namespace detail {

void throwCudaError(int err, const char* expr, const char* file, int line) {
  auto e = static_cast<cudaError_t>(err);
  throw Error(ErrorCode::CudaError, concat(expr, " failed: ", cudaGetErrorName(e), " (",
                                           cudaGetErrorString(e), ") at ", file, ":", line));
}

void throwCuError(int err, const char* expr, const char* file, int line) {
  // The driver's cuGetErrorName is reached through the runtime entry-point table; keep this path free of
  // a link-time libcuda dependency and print the numeric code (documented in cuda.h's CUresult).
  throw Error(ErrorCode::CudaError, concat(expr, " failed: CUresult ", err, " at ", file, ":", line));
}

void throwSystemError(int err, const std::string& what) {
  throw Error(ErrorCode::SystemError, concat(what, ": ", std::strerror(err), " (errno ", err, ")"));
}

}  // namespace detail
}  // namespace meshcomm
