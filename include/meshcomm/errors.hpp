// Errors: one exception type with a code; every message names rank, operation and argument/peer.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace meshcomm {

enum class ErrorCode {
  InvalidUsage,   // the caller passed something unsupported or inconsistent
  SystemError,    // an OS call failed (errno attached in the text)
  CudaError,      // a CUDA runtime/driver call failed
  Timeout,        // a blocking host or device operation exceeded its timeout
  RemoteError,    // a peer closed, died, or sent something invalid
  InternalError,  // a bug in meshcomm
};

const char* errorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(errorCodeName(code)) + ": " + message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
[[noreturn]] void throwCudaError(int err, const char* expr, const char* file, int line);
[[noreturn]] void throwCuError(int err, const char* expr, const char* file, int line);
[[noreturn]] void throwSystemError(int err, const std::string& what);
}  // namespace detail

}  // namespace meshcomm

// Throws meshcomm::Error(code, message) where message is the concatenation of the arguments.
#define MESHCOMM_THROW(code, ...) throw ::meshcomm::Error((code), ::meshcomm::detail::concat(__VA_ARGS__))

// Checks a condition that a caller controls; the message must name rank, operation and argument.
#define MESHCOMM_REQUIRE(cond, ...)                                                \
  do {                                                                             \
    if (!(cond)) MESHCOMM_THROW(::meshcomm::ErrorCode::InvalidUsage, __VA_ARGS__); \
  } while (0)

// Checks a CUDA runtime call (cudaError_t).
#define MESHCOMM_CUDA_CHECK(expr)                                                                         \
  do {                                                                                                    \
    auto meshcomm_err_ = (expr);                                                                          \
    if (meshcomm_err_ != 0) ::meshcomm::detail::throwCudaError(meshcomm_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Checks a CUDA driver call (CUresult).
#define MESHCOMM_CU_CHECK(expr)                                                                         \
  do {                                                                                                  \
    auto meshcomm_err_ = (expr);                                                                        \
    if (meshcomm_err_ != 0) ::meshcomm::detail::throwCuError(meshcomm_err_, #expr, __FILE__, __LINE__); \
  } while (0)
