// Element traits and reductions for every DataType x ReduceOp, on single elements and on 16-byte "packs"
// (a uint4 of 16/sizeof(T) elements), so kernels move and reduce 16 bytes per thread per step. Plus a host
// dispatch helper that turns a runtime (dtype, op) into compile-time template arguments.
//
// Arithmetic contract (every rank must produce bit-identical results):
//  - callers reduce the inputs of ranks 0..n-1 in rank order: first(x0), accumulate(x1), ..., finish();
//  - f16, bf16, fp8 accumulate in float and round once at the end (fp8: saturating to the largest finite
//    value, as cuda_fp8's conversions do); f32 in float, f64 in double;
//  - integers accumulate in their own width with wrap-around (sum, prod), so avg = (wrapped sum) / n with
//    truncating division, as NCCL does;
//  - avg: sum, then divide by nRanks at the end;
//  - premulsum: every input is multiplied by the scalar (converted to the element type first, so a host
//    scalar and the same value given on the device give the same result) and the products are summed.
#pragma once

#include <cstdint>
#include <type_traits>

#include "meshcomm/device/macros.hpp"
#include "meshcomm/types.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace meshcomm {

// What a reduction kernel needs besides the op: the premulsum scalar and nRanks (avg). Passed by value.
struct ReduceParams {
  double hostScalar;         // premulsum scalar given on the host (used when deviceScalar is null)
  const void* deviceScalar;  // premulsum scalar in device memory: one element of the collective's dtype
  int32_t nRanks;            // avg divisor
};

inline ReduceParams makeReduceParams(const ReduceOpSpec& spec, int nRanks) {
  return ReduceParams{spec.hostScalar, spec.deviceScalar, static_cast<int32_t>(nRanks)};
}

// Compile-time (dtype, op) pair handed to the functor of dispatchReduction().
template <DataType D, ReduceOp Op>
struct ReductionTag {
  static constexpr DataType kType = D;
  static constexpr ReduceOp kOp = Op;
};

namespace detail {
template <DataType D, typename F>
bool dispatchReduceOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::Sum:
      f(ReductionTag<D, ReduceOp::Sum>{});
      return true;
    case ReduceOp::Prod:
      f(ReductionTag<D, ReduceOp::Prod>{});
      return true;
    case ReduceOp::Min:
      f(ReductionTag<D, ReduceOp::Min>{});
      return true;
    case ReduceOp::Max:
      f(ReductionTag<D, ReduceOp::Max>{});
      return true;
    case ReduceOp::Avg:
      f(ReductionTag<D, ReduceOp::Avg>{});
      return true;
    case ReduceOp::PreMulSum:
      f(ReductionTag<D, ReduceOp::PreMulSum>{});
      return true;
  }
  return false;
}
}  // namespace detail

// Calls f(ReductionTag<dtype, op>{}) with compile-time arguments; false for an unknown dtype or op.
// Typical use: dispatchReduction(dt, op, [&](auto tag) { using Tag = decltype(tag);
//                                   kernel<Tag::kType, Tag::kOp><<<g, b, 0, s>>>(...); });
template <typename F>
bool dispatchReduction(DataType dtype, ReduceOp op, F&& f) {
  switch (dtype) {
    case DataType::F32:
      return detail::dispatchReduceOp<DataType::F32>(op, f);
    case DataType::F16:
      return detail::dispatchReduceOp<DataType::F16>(op, f);
    case DataType::BF16:
      return detail::dispatchReduceOp<DataType::BF16>(op, f);
    case DataType::F64:
      return detail::dispatchReduceOp<DataType::F64>(op, f);
    case DataType::I8:
      return detail::dispatchReduceOp<DataType::I8>(op, f);
    case DataType::U8:
      return detail::dispatchReduceOp<DataType::U8>(op, f);
    case DataType::I32:
      return detail::dispatchReduceOp<DataType::I32>(op, f);
    case DataType::U32:
      return detail::dispatchReduceOp<DataType::U32>(op, f);
    case DataType::I64:
      return detail::dispatchReduceOp<DataType::I64>(op, f);
    case DataType::U64:
      return detail::dispatchReduceOp<DataType::U64>(op, f);
    case DataType::F8E4M3:
      return detail::dispatchReduceOp<DataType::F8E4M3>(op, f);
    case DataType::F8E5M2:
      return detail::dispatchReduceOp<DataType::F8E5M2>(op, f);
  }
  return false;
}

#if defined(__CUDACC__)
namespace device {

// Element<D>: Raw = the bits in memory, Acc = the type reductions compute in.
//   toAcc(Raw), fromAcc(Acc) (rounding back), fromDouble(double) (a scalar converted to the element type).
template <DataType D>
struct Element;

template <>
struct Element<DataType::F32> {
  using Raw = uint32_t;
  using Acc = float;
  static constexpr bool kFloat = true;
  MESHCOMM_DEVICE_INLINE static Acc toAcc(Raw r) { return __uint_as_float(r); }
  MESHCOMM_DEVICE_INLINE static Raw fromAcc(Acc a) { return __float_as_uint(a); }
  MESHCOMM_DEVICE_INLINE static Raw fromDouble(double d) { return __float_as_uint(static_cast<float>(d)); }
};

template <>
struct Element<DataType::F64> {
  using Raw = uint64_t;
  using Acc = double;
  static constexpr bool kFloat = true;
  MESHCOMM_DEVICE_INLINE static Acc toAcc(Raw r) { return __longlong_as_double(static_cast<long long>(r)); }
  MESHCOMM_DEVICE_INLINE static Raw fromAcc(Acc a) { return static_cast<Raw>(__double_as_longlong(a)); }
  MESHCOMM_DEVICE_INLINE static Raw fromDouble(double d) { return fromAcc(d); }
};

template <>
struct Element<DataType::F16> {
  using Raw = uint16_t;
  using Acc = float;
  static constexpr bool kFloat = true;
  MESHCOMM_DEVICE_INLINE static Acc toAcc(Raw r) { return __half2float(__ushort_as_half(r)); }
  MESHCOMM_DEVICE_INLINE static Raw fromAcc(Acc a) { return __half_as_ushort(__float2half_rn(a)); }
  MESHCOMM_DEVICE_INLINE static Raw fromDouble(double d) { return __half_as_ushort(__double2half(d)); }
};

template <>
struct Element<DataType::BF16> {
  using Raw = uint16_t;
  using Acc = float;
  static constexpr bool kFloat = true;
  MESHCOMM_DEVICE_INLINE static Acc toAcc(Raw r) { return __bfloat162float(__ushort_as_bfloat16(r)); }
  MESHCOMM_DEVICE_INLINE static Raw fromAcc(Acc a) { return __bfloat16_as_ushort(__float2bfloat16_rn(a)); }
  MESHCOMM_DEVICE_INLINE static Raw fromDouble(double d) {
    return __bfloat16_as_ushort(__double2bfloat16(d));
  }
};

template <__nv_fp8_interpretation_t Kind>
struct Fp8Element {
  using Raw = uint8_t;
  using Acc = float;
  static constexpr bool kFloat = true;
  MESHCOMM_DEVICE_INLINE static Acc toAcc(Raw r) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(r), Kind)));
  }
  // Round to nearest even, saturating to the largest finite value (NaN stays NaN), like __nv_fp8_e4m3(float).
  MESHCOMM_DEVICE_INLINE static Raw fromAcc(Acc a) {
    return static_cast<Raw>(__nv_cvt_float_to_fp8(a, __NV_SATFINITE, Kind));
  }
  MESHCOMM_DEVICE_INLINE static Raw fromDouble(double d) {
    return static_cast<Raw>(__nv_cvt_double_to_fp8(d, __NV_SATFINITE, Kind));
  }
};
template <>
struct Element<DataType::F8E4M3> : Fp8Element<__NV_E4M3> {};
template <>
struct Element<DataType::F8E5M2> : Fp8Element<__NV_E5M2> {};

template <typename T>
struct IntElement {
  using Raw = T;
  using Acc = T;
  static constexpr bool kFloat = false;
  MESHCOMM_DEVICE_INLINE static Acc toAcc(Raw r) { return r; }
  MESHCOMM_DEVICE_INLINE static Raw fromAcc(Acc a) { return a; }
  // An integral scalar wraps modulo 2^bits (-1 is all ones for unsigned types); a fraction is truncated.
  MESHCOMM_DEVICE_INLINE static Raw fromDouble(double d) {
    return d < 0 ? static_cast<T>(static_cast<long long>(d))
                 : static_cast<T>(static_cast<unsigned long long>(d));
  }
};
template <>
struct Element<DataType::I8> : IntElement<int8_t> {};
template <>
struct Element<DataType::U8> : IntElement<uint8_t> {};
template <>
struct Element<DataType::I32> : IntElement<int32_t> {};
template <>
struct Element<DataType::U32> : IntElement<uint32_t> {};
template <>
struct Element<DataType::I64> : IntElement<int64_t> {};
template <>
struct Element<DataType::U64> : IntElement<uint64_t> {};

namespace detail {
// Wrap-around integer arithmetic without signed-overflow UB.
template <typename T>
using WrapUnsigned = std::conditional_t<(sizeof(T) > 4), unsigned long long, unsigned int>;
template <typename T>
MESHCOMM_DEVICE_INLINE T wrapAdd(T a, T b) {
  return static_cast<T>(static_cast<WrapUnsigned<T>>(a) + static_cast<WrapUnsigned<T>>(b));
}
template <typename T>
MESHCOMM_DEVICE_INLINE T wrapMul(T a, T b) {
  return static_cast<T>(static_cast<WrapUnsigned<T>>(a) * static_cast<WrapUnsigned<T>>(b));
}
}  // namespace detail

// One reduction: construct once per thread (reads the device premulsum scalar once), then per element
// (or pack): first(x of rank 0), accumulate(x of rank r) for r = 1..n-1 in order, finish().
template <DataType D, ReduceOp Op>
struct Reducer {
  using E = Element<D>;
  using Raw = typename E::Raw;
  using Acc = typename E::Acc;
  static constexpr int kPerPack = 16 / static_cast<int>(sizeof(Raw));
  struct Accs {
    Acc v[kPerPack];
  };
  union PackView {
    uint4 u;
    Raw e[kPerPack];
  };

  Acc scalar;
  int32_t nRanks;

  MESHCOMM_DEVICE_INLINE explicit Reducer(const ReduceParams& p) : scalar(Acc{}), nRanks(p.nRanks) {
    if constexpr (Op == ReduceOp::PreMulSum) {
      scalar = p.deviceScalar != nullptr ? E::toAcc(*static_cast<const Raw*>(p.deviceScalar))
                                         : E::toAcc(E::fromDouble(p.hostScalar));
    }
  }

  MESHCOMM_DEVICE_INLINE static Acc add(Acc a, Acc b) {
    if constexpr (E::kFloat) {
      return a + b;
    } else {
      return detail::wrapAdd(a, b);
    }
  }
  MESHCOMM_DEVICE_INLINE static Acc mul(Acc a, Acc b) {
    if constexpr (E::kFloat) {
      return a * b;
    } else {
      return detail::wrapMul(a, b);
    }
  }
  MESHCOMM_DEVICE_INLINE static Acc minimum(Acc a, Acc b) {
    if constexpr (std::is_same_v<Acc, float>) {
      return fminf(a, b);
    } else if constexpr (std::is_same_v<Acc, double>) {
      return fmin(a, b);
    } else {
      return b < a ? b : a;
    }
  }
  MESHCOMM_DEVICE_INLINE static Acc maximum(Acc a, Acc b) {
    if constexpr (std::is_same_v<Acc, float>) {
      return fmaxf(a, b);
    } else if constexpr (std::is_same_v<Acc, double>) {
      return fmax(a, b);
    } else {
      return a < b ? b : a;
    }
  }

  // Element level. first/accumulate take this rank's own input (premulsum: multiplied by this rank's
  // scalar, as NCCL's premulsum scales each rank's input by that rank's scalar); the *Prescaled variants
  // take a peer's contribution that its owner already passed through prescale().
  MESHCOMM_DEVICE_INLINE Acc first(Raw x) const {
    Acc v = E::toAcc(x);
    if constexpr (Op == ReduceOp::PreMulSum) v = mul(v, scalar);
    return v;
  }
  MESHCOMM_DEVICE_INLINE static Acc firstPrescaled(Raw x) { return E::toAcc(x); }
  MESHCOMM_DEVICE_INLINE static void combine(Acc& acc, Acc v) {
    if constexpr (Op == ReduceOp::Prod) {
      acc = mul(acc, v);
    } else if constexpr (Op == ReduceOp::Min) {
      acc = minimum(acc, v);
    } else if constexpr (Op == ReduceOp::Max) {
      acc = maximum(acc, v);
    } else {  // Sum, Avg, PreMulSum
      acc = add(acc, v);
    }
  }
  MESHCOMM_DEVICE_INLINE void accumulate(Acc& acc, Raw x) const { combine(acc, first(x)); }
  MESHCOMM_DEVICE_INLINE static void accumulatePrescaled(Acc& acc, Raw x) { combine(acc, E::toAcc(x)); }
  // This rank's input element as its peers must reduce it (premulsum: scaled and rounded to the type).
  MESHCOMM_DEVICE_INLINE Raw prescale(Raw x) const {
    if constexpr (Op == ReduceOp::PreMulSum) {
      return E::fromAcc(first(x));
    } else {
      return x;
    }
  }
  MESHCOMM_DEVICE_INLINE Raw finish(Acc acc) const {
    if constexpr (Op == ReduceOp::Avg) {
      if constexpr (E::kFloat) {
        return E::fromAcc(acc / static_cast<Acc>(nRanks));
      } else {
        return static_cast<Raw>(acc / static_cast<Acc>(nRanks));  // truncating division of the wrapped sum
      }
    } else {
      return E::fromAcc(acc);
    }
  }

  // Pack level (16 bytes = kPerPack elements): the element-level operations above, element by element.
  template <class F>
  MESHCOMM_DEVICE_INLINE static void eachElement(const uint4& x, F&& f) {
    PackView pv;
    pv.u = x;
#pragma unroll
    for (int k = 0; k < kPerPack; ++k) f(k, pv.e[k]);
  }
  MESHCOMM_DEVICE_INLINE void first(Accs& acc, const uint4& x) const {
    eachElement(x, [&](int k, Raw e) { acc.v[k] = first(e); });
  }
  MESHCOMM_DEVICE_INLINE void accumulate(Accs& acc, const uint4& x) const {
    eachElement(x, [&](int k, Raw e) { accumulate(acc.v[k], e); });
  }
  MESHCOMM_DEVICE_INLINE void firstPrescaled(Accs& acc, const uint4& x) const {
    eachElement(x, [&](int k, Raw e) { acc.v[k] = firstPrescaled(e); });
  }
  MESHCOMM_DEVICE_INLINE void accumulatePrescaled(Accs& acc, const uint4& x) const {
    eachElement(x, [&](int k, Raw e) { accumulatePrescaled(acc.v[k], e); });
  }
  MESHCOMM_DEVICE_INLINE uint4 prescale(const uint4& x) const {
    if constexpr (Op == ReduceOp::PreMulSum) {
      PackView out;
      eachElement(x, [&](int k, Raw e) { out.e[k] = prescale(e); });
      return out.u;
    } else {
      return x;
    }
  }
  MESHCOMM_DEVICE_INLINE uint4 finish(const Accs& acc) const {
    PackView pv;
#pragma unroll
    for (int k = 0; k < kPerPack; ++k) pv.e[k] = finish(acc.v[k]);
    return pv.u;
  }

  // Chained reductions (one rank at a time, e.g. reduce_chain): a partial result travels between ranks as
  // elements. partial() stores the accumulator without finishing (no avg division); resume() takes such a
  // partial back as the accumulator (no premulsum scaling: it was applied when each term was added).
  MESHCOMM_DEVICE_INLINE uint4 partial(const Accs& acc) const {
    PackView pv;
#pragma unroll
    for (int k = 0; k < kPerPack; ++k) pv.e[k] = E::fromAcc(acc.v[k]);
    return pv.u;
  }
  MESHCOMM_DEVICE_INLINE void resume(Accs& acc, const uint4& partialPack) const {
    firstPrescaled(acc, partialPack);
  }
};

}  // namespace device
#endif
}  // namespace meshcomm
