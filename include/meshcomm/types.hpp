// Element types and reduction operators of the collective API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshcomm {

enum class DataType : uint8_t {
  F32 = 0,
  F16 = 1,
  BF16 = 2,
  F64 = 3,
  I8 = 4,
  U8 = 5,
  I32 = 6,
  U32 = 7,
  I64 = 8,
  U64 = 9,
  F8E4M3 = 10,
  F8E5M2 = 11,
};
constexpr int kNumDataTypes = 12;

size_t dataTypeSize(DataType t);
const char* dataTypeName(DataType t);  // "float", "half", "bfloat16", ... (nccl-tests names)
bool isFloatingPoint(DataType t);

enum class ReduceOp : uint8_t { Sum = 0, Prod = 1, Min = 2, Max = 3, Avg = 4, PreMulSum = 5 };
const char* reduceOpName(ReduceOp op);  // "sum", "prod", "min", "max", "avg", "premulsum"

// A reduction: the operator and, for PreMulSum, the scalar this rank's input is multiplied by before the
// sum (each rank brings its own scalar, as NCCL's ncclRedOpCreatePreMulSum), given either on the host (read
// at call time, captured by value in CUDA graphs; converted to the dtype, integers modulo 2^bits) or in
// device memory of the communicator's GPU (one element of the collective's dtype, read when the kernel runs).
struct ReduceOpSpec {
  ReduceOp op = ReduceOp::Sum;
  double hostScalar = 1.0;
  const void* deviceScalar = nullptr;

  ReduceOpSpec() = default;
  ReduceOpSpec(ReduceOp o) : op(o) {}  // NOLINT: implicit by design, `ReduceOp::Max` reads as a spec
  static ReduceOpSpec preMulSum(double scalar) {
    ReduceOpSpec s(ReduceOp::PreMulSum);
    s.hostScalar = scalar;
    return s;
  }
  static ReduceOpSpec preMulSumDevice(const void* scalar) {
    ReduceOpSpec s(ReduceOp::PreMulSum);
    s.deviceScalar = scalar;
    return s;
  }
};

}  // namespace meshcomm
