#include "nccl/nccl_types.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
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

std::string simInfoProblem(const ncclSimInfo_t* s) {
  constexpr ncclSimInfo_t kInitializer = NCCL_SIM_INFO_INITIALIZER;
  if (s == nullptr) return "simInfo is NULL";
  if (s->magic != kInitializer.magic)
    return "simInfo was not initialized with NCCL_SIM_INFO_INITIALIZER (bad magic)";
  if (s->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
    return detail::concat("simInfo size ", s->size, " is too small for estimatedTime");
  if (s->version < static_cast<unsigned>(NCCL_VERSION(2, 22, 0)))
    return detail::concat("simInfo version ", s->version, " is older than NCCL 2.22 (ncclSimInfo_t's first)");
  return {};
}

int scalableIdCreator(int id, int nRanks, int nIds) {
  const int perId = nRanks / nIds, larger = nRanks % nIds;  // the first `larger` blocks hold perId + 1 ranks
  return id * perId + std::min(id, larger);
}

namespace {

// One launch of an algorithm: latency (us) and bandwidth of the traffic (GB/s = 1e3 bytes/us). Fitted to
// meshcomm-bench on 4x H200 (bench/results/2026-11-22-h200x4-collectives-ll-kernel-tails.json;
// allgather_ll and alltoall_ll: 2026-11-22-h200x4-ll-packet-per-thread.md, one LL packet per thread;
// docs/nccl.md).
struct LaunchCost {
  const char* algorithm;
  Collective collective;
  double latencyUs;
  double gbPerS;
  bool largeMessage;  // the collective's fallback for algorithms without measurements
};
constexpr LaunchCost kLaunchCosts[] = {
    {"allreduce_oneshot_ll", Collective::AllReduce, 6.1, 80, false},
    {"allreduce_rsag", Collective::AllReduce, 15.3, 341, true},
    {"allgather_ll", Collective::AllGather, 3.2, 150, false},
    {"allgather_scratch", Collective::AllGather, 10.0, 324, true},
    {"reduce_scatter_ll", Collective::ReduceScatter, 6.4, 159, false},
    {"reduce_scatter_scratch", Collective::ReduceScatter, 9.7, 321, true},
    {"alltoall_ll", Collective::AllToAll, 3.2, 144, false},
    {"alltoall_scratch", Collective::AllToAll, 10.4, 322, true},
    {"broadcast_ll", Collective::Broadcast, 3.3, 129, false},
    {"broadcast_chain", Collective::Broadcast, 8.0, 346, true},
    {"reduce_direct", Collective::Reduce, 5.1, 139, false},
    {"reduce_chain", Collective::Reduce, 7.6, 339, true},
    {"gather_ll", Collective::Gather, 3.4, 400, false},
    {"gather_scratch", Collective::Gather, 4.8, 385, true},
    {"scatter_ll", Collective::Scatter, 3.5, 400, false},
    {"scatter_scratch", Collective::Scatter, 5.8, 350, true},
    // gather_stream / scatter_stream: the sizes the 4-rank table gives them (gather 1-4 MiB: 5.84, 11.94 us;
    // scatter 1-64 KiB: 3.31-3.55 us, no bandwidth resolved),
    // bench/results/2026-11-22-h200x4-nccl-shim-acceptance.md.
    {"gather_stream", Collective::Gather, 3.8, 387, false},
    {"scatter_stream", Collective::Scatter, 3.4, 400, false},
    {"alltoallv_ll", Collective::AllToAllv, 5.9, 241, true},
    {"sendrecv_ll", Collective::SendRecv, 5.2, 312, true},
};
// A collective without any measurement (barrier): the slowest latency and bandwidth above.
constexpr LaunchCost kUnmeasured = {"", Collective::Barrier, 15.3, 53, true};

const LaunchCost& launchCost(Collective c, const std::string& algorithm) {
  const LaunchCost* fallback = &kUnmeasured;
  for (const LaunchCost& k : kLaunchCosts) {
    if (k.collective != c) continue;
    if (algorithm == k.algorithm) return k;
    if (k.largeMessage) fallback = &k;
  }
  return *fallback;
}

double trafficPerMessageByte(Collective c, int nRanks) {
  const double n = nRanks, part = (n - 1) / n;
  switch (c) {
    case Collective::AllReduce:
      return 2 * part;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
    case Collective::AllToAllv:
    case Collective::Gather:
    case Collective::Scatter:
      return part;
    default:
      return 1;
  }
}

}  // namespace

double estimateLaunchMicroseconds(Collective c, const std::string& algorithm, size_t messageBytes,
                                  int nRanks) {
  const LaunchCost& k = launchCost(c, algorithm);
  const double bytesPerUs = k.gbPerS * 1e3;
  return k.latencyUs + trafficPerMessageByte(c, nRanks) * static_cast<double>(messageBytes) / bytesPerUs;
}

}  // namespace meshcomm::nccl
