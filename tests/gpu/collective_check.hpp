// Helpers of the collective tests (test_collectives.cu): typed random inputs that the host can regenerate
// for every rank, a host reference in float64 (floating-point types) or exact modular integer arithmetic,
// guarded output buffers and the comparison.
//
// Inputs. Element i of rank r's input in case `seed` is genBits(spec, r, i): a hash of (seed, r, i) mapped
// to a value that is exactly representable in the dtype and never zero. Every rank fills its own input on
// the GPU; the host regenerates any rank's input from the same function (nothing is exchanged).
//   * General (sum, min, max, premulsum; data movement):
//       floats: a non-zero integer in [-R, R] with R per type chosen so that a sum over 8 ranks, even
//       multiplied by a premulsum scalar of magnitude <= 2, is exact in the type (f64 2^20, f32 1000, f16 64,
//       bf16 16, fp8 2): most float sums are therefore exact in any order; integers: the full range.
//   * Prod: floats: +-0.5, +-1, +-2 (every partial product is a power of two: exact in any order and in
//       range for <= 8 ranks); integers: random odd values (products mod 2^bits never become 0).
//   * IntAvg (avg on integers): nRanks * k with small k, so that divide-then-sum and sum-then-divide agree
//       exactly and nothing overflows.
// Reference and comparison rule.
//   * Integers: exact. Sum, prod and premulsum wrap modulo 2^bits (order-independent); min/max compare as
//     signed or unsigned; avg = exact sum / nRanks (the inputs make it exact).
//   * Floats, min/max/prod: exact (the result is one of the inputs or a power of two).
//   * Floats, sum/avg/premulsum: |got - ref| <= (nRanks + 2) * u * sum_r |term_r|, with ref and the terms in
//     float64 and u the unit roundoff of the type (2^-24 f32, 2^-53 f64, 2^-11 f16, 2^-8 bf16, 2^-4 e4m3,
//     2^-3 e5m2). That is the classic bound for a recursive sum of nRanks terms in any order with every
//     partial result rounded to the type (nRanks - 1 roundings), plus one rounding for the premulsum
//     product and one for avg's division. NaN/Inf never pass.
//   * Bit identity: every rank's allreduce output must hash to the same value (compared through the
//     bootstrap), whatever the tolerance allowed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_env.hpp"
#include "meshcomm/types.hpp"

namespace meshcomm::test {

constexpr DataType kAllDataTypes[] = {DataType::F32, DataType::F16, DataType::BF16,   DataType::F64,
                                      DataType::I8,  DataType::U8,  DataType::I32,    DataType::U32,
                                      DataType::I64, DataType::U64, DataType::F8E4M3, DataType::F8E5M2};

struct DtypeInfo {
  uint32_t size;
  bool isFloat;
  bool isSigned;                // integers
  int expBits, mantBits, bias;  // floats (f32/f64 included)
  double unitRoundoff;          // floats: 2^-(mantBits+1)
};

MESHCOMM_HOST_DEVICE_INLINE DtypeInfo dtypeInfo(DataType t) {
  switch (t) {
    case DataType::F32:
      return {4, true, true, 8, 23, 127, 5.9604644775390625e-08};
    case DataType::F16:
      return {2, true, true, 5, 10, 15, 4.8828125e-04};
    case DataType::BF16:
      return {2, true, true, 8, 7, 127, 3.90625e-03};
    case DataType::F64:
      return {8, true, true, 11, 52, 1023, 1.1102230246251565e-16};
    case DataType::I8:
      return {1, false, true, 0, 0, 0, 0};
    case DataType::U8:
      return {1, false, false, 0, 0, 0, 0};
    case DataType::I32:
      return {4, false, true, 0, 0, 0, 0};
    case DataType::U32:
      return {4, false, false, 0, 0, 0, 0};
    case DataType::I64:
      return {8, false, true, 0, 0, 0, 0};
    case DataType::U64:
      return {8, false, false, 0, 0, 0, 0};
    case DataType::F8E4M3:
      return {1, true, true, 4, 3, 7, 0.0625};
    case DataType::F8E5M2:
      return {1, true, true, 5, 2, 15, 0.125};
  }
  return {1, false, false, 0, 0, 0, 0};
}

// Encodes a value that is exactly representable in the float type `t` (no rounding is needed or done).
MESHCOMM_HOST_DEVICE_INLINE uint64_t encodeExactFloat(double v, DataType t) {
  if (t == DataType::F64) {
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
  }
  if (t == DataType::F32) {
    const float f = static_cast<float>(v);
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }
  const DtypeInfo d = dtypeInfo(t);
  const uint64_t sign = v < 0 ? 1ull << (d.expBits + d.mantBits) : 0;
  double a = v < 0 ? -v : v;
  if (a == 0) return sign;
  int e = 0;
  // a = m * 2^e with m in [1, 2)
  while (a >= 2) {
    a /= 2;
    ++e;
  }
  while (a < 1) {
    a *= 2;
    --e;
  }
  int biased = e + d.bias;
  if (biased >= 1) {
    const uint64_t mant = static_cast<uint64_t>((a - 1) * static_cast<double>(1ull << d.mantBits));
    return sign | (static_cast<uint64_t>(biased) << d.mantBits) | mant;
  }
  // subnormal: a * 2^e = mant * 2^(1 - bias - mantBits)
  double m = a;
  for (int k = e; k < 0; ++k) m /= 2;
  for (int k = e; k > 0; --k) m *= 2;
  for (int k = 0; k < d.bias - 1 + d.mantBits; ++k) m *= 2;
  return sign | static_cast<uint64_t>(m);
}

// Host: the value of float bits (any bit pattern; NaN/Inf come back as NaN/Inf).
double decodeFloat(uint64_t bits, DataType t);
// Host: an integer element as a sign-extended (signed types) or zero-extended 64-bit value.
uint64_t extendInt(uint64_t bits, DataType t);

enum class ValueKind : uint8_t { General = 0, Prod = 1, IntAvg = 2 };

// What a rank's input of one case holds (see the top of this file).
struct GenSpec {
  DataType dtype = DataType::F32;
  ValueKind kind = ValueKind::General;
  int nRanks = 1;
  uint64_t seed = 1;
};

MESHCOMM_HOST_DEVICE_INLINE double floatRange(DataType t) {
  switch (t) {
    case DataType::F64:
      return 1048576.0;
    case DataType::F32:
      return 1000.0;
    case DataType::F16:
      return 64.0;
    case DataType::BF16:
      return 16.0;
    default:
      return 2.0;  // fp8
  }
}

// The raw bits (low dtype-size bytes) of element i of rank r's input.
MESHCOMM_HOST_DEVICE_INLINE uint64_t genBits(const GenSpec& s, int r, uint64_t i) {
  const uint64_t h = mix64(s.seed ^ mix64((static_cast<uint64_t>(r) << 48) ^ i));
  const DtypeInfo d = dtypeInfo(s.dtype);
  const uint64_t mask = d.size == 8 ? ~0ull : ((1ull << (8 * d.size)) - 1);
  if (d.isFloat) {
    double v;
    if (s.kind == ValueKind::Prod) {
      const double vals[3] = {0.5, 1.0, 2.0};
      v = vals[h % 3];
    } else {
      const uint64_t range = static_cast<uint64_t>(floatRange(s.dtype));
      v = static_cast<double>((h >> 8) % range + 1);
    }
    if ((h >> 63) & 1) v = -v;
    return encodeExactFloat(v, s.dtype);
  }
  if (s.kind == ValueKind::Prod) return (h | 1) & mask;
  if (s.kind == ValueKind::IntAvg) {
    const int n = s.nRanks < 1 ? 1 : s.nRanks;
    const uint64_t maxT = d.size == 8 ? (1ull << 40) : (mask >> (d.isSigned ? 1 : 0));
    uint64_t kmax = maxT / static_cast<uint64_t>(n) / static_cast<uint64_t>(n);
    if (kmax < 1) kmax = 1;
    if (kmax > 1000000) kmax = 1000000;
    int64_t k = static_cast<int64_t>((h >> 8) % kmax + 1);
    if (d.isSigned && ((h >> 63) & 1)) k = -k;
    return static_cast<uint64_t>(k * n) & mask;
  }
  const uint64_t v = h & mask;
  return v != 0 ? v : 1;
}

// Enqueues: dst[i] = genBits(spec, rank, first + i) for i < count (dst aligned to the element size).
void fillGenerated(cudaStream_t stream, void* dst, uint64_t count, const GenSpec& spec, int rank,
                   uint64_t first = 0);
// Enqueues: counts into *counter (device) the elements of src that differ from genBits(spec, rank, first+i).
void countGenMismatches(cudaStream_t stream, const void* src, uint64_t count, const GenSpec& spec, int rank,
                        uint64_t first, unsigned long long* counter);
// Enqueues: counts into *counter the bytes of [p, p+bytes) that are not `value`.
void countBytesNot(cudaStream_t stream, const void* p, uint64_t bytes, uint8_t value,
                   unsigned long long* counter);

// One expected element: exact bits, or (floats under a tolerance) value +- tol.
struct Expected {
  bool exact = true;
  uint64_t bits = 0;
  double value = 0, tol = 0;
};

// The op a reduction case runs, with how its premulsum scalar is given.
struct RedCase {
  ReduceOp op = ReduceOp::Sum;
  bool deviceScalar = false;  // PreMulSum only
  std::string name() const;   // "sum", ..., "premulsum(host)", "premulsum(device)"
};
// Rank `rank`'s scalar of PreMulSum cases (host and device variant), as a double. Ranks use different
// scalars (NCCL semantics: each rank's input is multiplied by its own scalar before the sum); all are
// powers of two (floats) or small integers, so the exactness argument above holds.
double preMulScalar(DataType t, bool device, int rank);
ValueKind valueKindFor(DataType t, ReduceOp op);

// Reduction over the ranks of element `index` of every rank's input.
Expected reduceExpected(const GenSpec& spec, const RedCase& op, uint64_t index);
// Data movement: element `index` of rank `src`'s input.
inline Expected copyExpected(const GenSpec& spec, int src, uint64_t index) {
  Expected e;
  e.bits = genBits(spec, src, index);
  return e;
}
// True when `gotBits` (raw element bits) satisfies `e`.
bool matches(uint64_t gotBits, const Expected& e, DataType t);
std::string describeElement(uint64_t bits, DataType t);

// A device allocation with poisoned guard zones around a payload at an element offset:
// [0, kGuard) guard | offset*elem | payload (capacity) | kGuard guard.
class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 4096;
  static constexpr size_t kMaxOffsetBytes = 16 * 8;  // 15 elements of up to 8 bytes, rounded up
  GuardedBuffer() = default;
  explicit GuardedBuffer(size_t capacityBytes);
  size_t capacity() const { return capacity_; }
  // The payload pointer at `offsetBytes` (< kMaxOffsetBytes) past the aligned payload start.
  char* at(size_t offsetBytes) const { return base() + kGuard + offsetBytes; }
  char* base() const { return static_cast<char*>(buf_.data()); }
  size_t totalBytes() const { return buf_.size(); }
  // Enqueues a memset of the whole allocation.
  void poison(cudaStream_t stream, uint8_t byte) const;
  // Enqueues: counts the bytes outside [p, p+bytes) (p inside the allocation) that are not `byte`.
  void countOutside(cudaStream_t stream, const void* p, size_t bytes, uint8_t byte,
                    unsigned long long* counter) const;

 private:
  GpuBuffer buf_;
  size_t capacity_ = 0;
};

// Device counters for guard / input checks, read back and reset together.
class DeviceCounters {
 public:
  explicit DeviceCounters(int n = 4);
  unsigned long long* at(int i) const { return static_cast<unsigned long long*>(buf_.data()) + i; }
  // Waits for `stream`, returns the counters and zeroes them.
  std::vector<unsigned long long> collect(cudaStream_t stream);

 private:
  GpuBuffer buf_;
  int n_;
};

// Result of comparing one output with its expectation.
struct Comparison {
  uint64_t mismatches = 0, checked = 0;
  std::string first;  // description of the first mismatch
  uint64_t hash = 0;  // hash of the compared bytes (bit identity across ranks)
};

// Downloads `count` elements at device pointer `p` and compares element i with expect(i); uses several
// host threads for large counts.
Comparison compareOutput(const void* p, uint64_t count, DataType t,
                         const std::function<Expected(uint64_t)>& expect);

// Parallel loop over [0, n) on the host (chunks on std::threads when n is large).
void parallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t)>& body);

}  // namespace meshcomm::test
