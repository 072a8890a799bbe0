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

// The stream-capture errors (cudaErrorStreamCaptureUnsupported .. WrongThread, the same numbers as
// CUDA_ERROR_STREAM_CAPTURE_*): the usual cause is meshcomm setup (a Comm, an algorithm, a buffer
// registration, a first call with new buffers) while a CUDA graph capture is in progress.
static_assert(cudaErrorStreamCaptureUnsupported == 900 && cudaErrorStreamCaptureWrongThread == 908 &&
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED == 900 && CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD == 908);
static const char* captureHint(int err) {
  return err >= 900 && err <= 908 ? "; a CUDA graph capture is in progress: set meshcomm up (communicators, "
                                    "algorithms, registrations, a first call per buffer) before capture"
                                  : "";
}

void throwCudaError(int err, const char* expr, const char* file, int line) {
  auto e = static_cast<cudaError_t>(err);
  throw Error(ErrorCode::CudaError,
              concat(expr, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") at ", file, ":",
                     line, captureHint(err)));
}

void throwCuError(int err, const char* expr, const char* file, int line) {
  // The driver's cuGetErrorName is reached through the runtime entry-point table; keep this path free of
  // a link-time libcuda dependency and print the numeric code (documented in cuda.h's CUresult).
  throw Error(ErrorCode::CudaError,
              concat(expr, " failed: CUresult ", err, " at ", file, ":", line, captureHint(err)));
}

void throwSystemError(int err, const std::string& what) {
  throw Error(ErrorCode::SystemError, concat(what, ": ", std::strerror(err), " (errno ", err, ")"));
}

}  // namespace detail
}  // namespace meshcomm
