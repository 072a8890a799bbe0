#include "nccl/nccl_types.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace meshcomm::nccl {

std::optional<DataType> dataTypeOf(int t) {
  switch (t) {
    case ncclInt8:
      return DataType::I8;
    case ncclUint8:
      return DataType::U8;
    case ncclInt32:
      return DataType::I32;
    case ncclUint32:
      return DataType::U32;
    case ncclInt64:
      return DataType::I64;
    case ncclUint64:
      return DataType::U64;
    case ncclFloat16:
      return DataType::F16;
    case ncclFloat32:
      return DataType::F32;
    case ncclFloat64:
      return DataType::F64;
    case ncclBfloat16:
      return DataType::BF16;
    case ncclFloat8e4m3:
      return DataType::F8E4M3;
    case ncclFloat8e5m2:
      return DataType::F8E5M2;
    default:
      return std::nullopt;
  }
}

std::optional<ReduceOp> builtinOpOf(int op) {
  switch (op) {
    case ncclSum:
      return ReduceOp::Sum;
    case ncclProd:
      return ReduceOp::Prod;
    case ncclMax:
      return ReduceOp::Max;
    case ncclMin:
      return ReduceOp::Min;
    case ncclAvg:
      return ReduceOp::Avg;
    default:
      return std::nullopt;
  }
}

ncclResult_t resultOf(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidUsage:
      return ncclInvalidUsage;
    case ErrorCode::SystemError:
      return ncclSystemError;
    case ErrorCode::CudaError:
      return ncclUnhandledCudaError;
    case ErrorCode::Timeout:
    case ErrorCode::RemoteError:
      return ncclRemoteError;
    case ErrorCode::InternalError:
      return ncclInternalError;
  }
  return ncclInternalError;
}

const char* resultText(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the meshcomm developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

namespace {

// An IEEE-style float with `expBits` exponent and `mantBits` mantissa bits (bias 2^(e-1)-1), stored in the
// low bits of `raw`. e4m3 (finite-only: exponent 15 with mantissa 7 is NaN) is handled by the caller.
double decodeFloat(uint32_t raw, int expBits, int mantBits) {
  const uint32_t mantMask = (1u << mantBits) - 1;
  const uint32_t expMask = (1u << expBits) - 1;
  const bool negative = (raw >> (expBits + mantBits)) & 1u;
  const uint32_t e = (raw >> mantBits) & expMask;
  const uint32_t m = raw & mantMask;
  const int bias = (1 << (expBits - 1)) - 1;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - mantBits);
  } else if (e == expMask) {
    v = m == 0 ? HUGE_VAL : NAN;
  } else {
    v = std::ldexp(static_cast<double>(m | (1u << mantBits)), static_cast<int>(e) - bias - mantBits);
  }
  return negative ? -v : v;
}

template <typename T>
T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

double elementToDouble(const void* p, DataType t) {
  switch (t) {
    case DataType::F32:
      return load<float>(p);
    case DataType::F64:
      return load<double>(p);
    case DataType::F16:
      return decodeFloat(load<uint16_t>(p), 5, 10);
    case DataType::BF16:
      return decodeFloat(load<uint16_t>(p), 8, 7);
    case DataType::F8E5M2:
      return decodeFloat(load<uint8_t>(p), 5, 2);
    case DataType::F8E4M3: {
      const uint8_t raw = load<uint8_t>(p);
      if ((raw & 0x7f) == 0x7f) return NAN;  // e4m3 has no infinities; S.1111.111 is NaN
      const uint32_t e = (raw >> 3) & 0xf, m = raw & 7;
      const double v = e == 0 ? std::ldexp(static_cast<double>(m), -9)
                              : std::ldexp(static_cast<double>(m | 8), static_cast<int>(e) - 10);
      return (raw & 0x80) ? -v : v;
    }
    case DataType::I8:
      return load<int8_t>(p);
    case DataType::U8:
      return load<uint8_t>(p);
    case DataType::I32:
      return load<int32_t>(p);
    case DataType::U32:
      return load<uint32_t>(p);
    case DataType::I64:
      return static_cast<double>(load<int64_t>(p));
    case DataType::U64:
      return static_cast<double>(load<uint64_t>(p));
  }
  return 0;
}

std::string configProblem(const ncclConfig_t* c) {
  if (c == nullptr) return {};
  if (c->magic != NCCL_CONFIG_MAGIC)
    return "config was not initialized with NCCL_CONFIG_INITIALIZER (bad magic)";
  if (c->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
    return detail::concat("config size ", c->size, " is too small");
  if (c->version < static_cast<unsigned>(NCCL_VERSION(2, 14, 0)))
    return detail::concat("config version ", c->version, " is older than NCCL 2.14");
  if (c->blocking != NCCL_CONFIG_UNDEF_INT && c->blocking != 0 && c->blocking != 1)
    return detail::concat("config.blocking must be 0 or 1, not ", c->blocking);
  return {};
}

}  // namespace meshcomm::nccl
