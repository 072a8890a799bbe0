#include "collective_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

namespace meshcomm::test {

namespace {

__device__ __forceinline__ uint64_t loadElem(const void* p, uint64_t i, uint32_t size) {
  switch (size) {
    case 1:
      return static_cast<const uint8_t*>(p)[i];
    case 2:
      return static_cast<const uint16_t*>(p)[i];
    case 4:
      return static_cast<const uint32_t*>(p)[i];
    default:
      return static_cast<const uint64_t*>(p)[i];
  }
}

__global__ void fillGeneratedKernel(void* dst, uint64_t count, GenSpec spec, int rank, uint64_t first) {
  const uint32_t size = dtypeInfo(spec.dtype).size;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t b = genBits(spec, rank, first + i);
    switch (size) {
      case 1:
        static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(b);
        break;
      case 2:
        static_cast<uint16_t*>(dst)[i] = static_cast<uint16_t>(b);
        break;
      case 4:
        static_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(b);
        break;
      default:
        static_cast<uint64_t*>(dst)[i] = b;
    }
  }
}

__global__ void countGenMismatchesKernel(const void* src, uint64_t count, GenSpec spec, int rank,
                                         uint64_t first, unsigned long long* counter) {
  const DtypeInfo d = dtypeInfo(spec.dtype);
  const uint64_t mask = d.size == 8 ? ~0ull : ((1ull << (8 * d.size)) - 1);
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    bad += loadElem(src, i, d.size) != (genBits(spec, rank, first + i) & mask);
  if (bad != 0) atomicAdd(counter, bad);  // a counter only: read by the host after the kernel
}

__global__ void countBytesNotKernel(const uint8_t* p, uint64_t bytes, uint8_t value,
                                    unsigned long long* counter) {
  unsigned long long bad = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    bad += p[i] != value;
  if (bad != 0) atomicAdd(counter, bad);
}

int gridFor(uint64_t n) {
  return static_cast<int>(std::clamp<uint64_t>((n + 255) / 256, 1, 1024));
}

uint64_t maskOf(DataType t) {
  const uint32_t s = dtypeInfo(t).size;
  return s == 8 ? ~0ull : ((1ull << (8 * s)) - 1);
}

uint64_t loadHost(const uint8_t* p, uint64_t i, uint32_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p + i * size, size);  // little-endian
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------------------

double decodeFloat(uint64_t bits, DataType t) {
  if (t == DataType::F64) {
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  if (t == DataType::F32) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  const DtypeInfo d = dtypeInfo(t);
  const uint64_t mant = bits & ((1ull << d.mantBits) - 1);
  const uint64_t exp = (bits >> d.mantBits) & ((1ull << d.expBits) - 1);
  const bool neg = (bits >> (d.expBits + d.mantBits)) & 1;
  const uint64_t expMax = (1ull << d.expBits) - 1;
  double v;
  if (t == DataType::F8E4M3) {
    if (exp == expMax && mant == ((1ull << d.mantBits) - 1)) return NAN;  // e4m3: no Inf, one NaN
  } else if (exp == expMax) {
    return mant != 0 ? NAN : (neg ? -INFINITY : INFINITY);
  }
  if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), 1 - d.bias - d.mantBits);
  else
    v = std::ldexp(1.0 + static_cast<double>(mant) / static_cast<double>(1ull << d.mantBits),
                   static_cast<int>(exp) - d.bias);
  return neg ? -v : v;
}

uint64_t extendInt(uint64_t bits, DataType t) {
  const DtypeInfo d = dtypeInfo(t);
  bits &= maskOf(t);
  if (d.isSigned && d.size < 8 && ((bits >> (8 * d.size - 1)) & 1)) bits |= ~maskOf(t);
  return bits;
}

std::string describeElement(uint64_t bits, DataType t) {
  char buf[96];
  const DtypeInfo d = dtypeInfo(t);
  if (d.isFloat)
    std::snprintf(buf, sizeof(buf), "%.17g (0x%llx)", decodeFloat(bits, t),
                  static_cast<unsigned long long>(bits & maskOf(t)));
  else if (d.isSigned)
    std::snprintf(buf, sizeof(buf), "%lld (0x%llx)", static_cast<long long>(extendInt(bits, t)),
                  static_cast<unsigned long long>(bits & maskOf(t)));
  else
    std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(bits & maskOf(t)));
  return buf;
}

// ---------------------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------------------

void fillGenerated(cudaStream_t stream, void* dst, uint64_t count, const GenSpec& spec, int rank,
                   uint64_t first) {
  if (count == 0) return;
  fillGeneratedKernel<<<gridFor(count), 256, 0, stream>>>(dst, count, spec, rank, first);
  MESHCOMM_TEST_CHECK_LAUNCH();
}

void countGenMismatches(cudaStream_t stream, const void* src, uint64_t count, const GenSpec& spec, int rank,
                        uint64_t first, unsigned long long* counter) {
  if (count == 0) return;
  countGenMismatchesKernel<<<gridFor(count), 256, 0, stream>>>(src, count, spec, rank, first, counter);
  MESHCOMM_TEST_CHECK_LAUNCH();
}

void countBytesNot(cudaStream_t stream, const void* p, uint64_t bytes, uint8_t value,
                   unsigned long long* counter) {
  if (bytes == 0) return;
  countBytesNotKernel<<<gridFor(bytes), 256, 0, stream>>>(static_cast<const uint8_t*>(p), bytes, value,
                                                          counter);
  MESHCOMM_TEST_CHECK_LAUNCH();
}

GuardedBuffer::GuardedBuffer(size_t capacityBytes)
    : buf_(2 * kGuard + kMaxOffsetBytes + capacityBytes), capacity_(capacityBytes) {}

void GuardedBuffer::poison(cudaStream_t stream, uint8_t byte) const {
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(buf_.data(), byte, buf_.size(), stream));
}

void GuardedBuffer::countOutside(cudaStream_t stream, const void* p, size_t bytes, uint8_t byte,
                                 unsigned long long* counter) const {
  const char* q = static_cast<const char*>(p);
  if (q < base() || q + bytes > base() + totalBytes())
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "GuardedBuffer::countOutside: range outside the allocation");
  countBytesNot(stream, base(), static_cast<uint64_t>(q - base()), byte, counter);
  countBytesNot(stream, q + bytes, static_cast<uint64_t>(base() + totalBytes() - (q + bytes)), byte, counter);
}

DeviceCounters::DeviceCounters(int n) : buf_(n * sizeof(unsigned long long)), n_(n) {}

std::vector<unsigned long long> DeviceCounters::collect(cudaStream_t stream) {
  std::vector<unsigned long long> v(n_);
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream));
  MESHCOMM_CUDA_CHECK(
      cudaMemcpy(v.data(), buf_.data(), n_ * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  MESHCOMM_CUDA_CHECK(cudaMemset(buf_.data(), 0, n_ * sizeof(unsigned long long)));
  return v;
}

// ---------------------------------------------------------------------------------------------------------
// Reference
// ---------------------------------------------------------------------------------------------------------

std::string RedCase::name() const {
  if (op != ReduceOp::PreMulSum) return reduceOpName(op);
  return deviceScalar ? "premulsum(device)" : "premulsum(host)";
}

double preMulScalar(DataType t, bool device, int rank) {
  static const double kFloatHost[] = {0.5, -1.0, 2.0, -0.5}, kFloatDevice[] = {-2.0, 1.0, 0.5, -1.0};
  static const double kIntHost[] = {3.0, -1.0, 5.0, 2.0}, kIntDevice[] = {2.0, 7.0, -3.0, 1.0};
  const int k = rank % 4;
  if (dtypeInfo(t).isFloat) return device ? kFloatDevice[k] : kFloatHost[k];
  return device ? kIntDevice[k] : kIntHost[k];
}

ValueKind valueKindFor(DataType t, ReduceOp op) {
  if (op == ReduceOp::Prod) return ValueKind::Prod;
  if (op == ReduceOp::Avg && !dtypeInfo(t).isFloat) return ValueKind::IntAvg;
  return ValueKind::General;
}

Expected reduceExpected(const GenSpec& spec, const RedCase& rc, uint64_t index) {
  const DataType t = spec.dtype;
  const DtypeInfo d = dtypeInfo(t);
  const int n = spec.nRanks;
  Expected e;
  if (!d.isFloat) {
    const uint64_t mask = maskOf(t);
    auto scalarOf = [&](int r) {
      return static_cast<uint64_t>(static_cast<int64_t>(preMulScalar(t, rc.deviceScalar, r)));
    };
    uint64_t acc = extendInt(genBits(spec, 0, index), t);
    if (rc.op == ReduceOp::PreMulSum) acc *= scalarOf(0);
    for (int r = 1; r < n; ++r) {
      const uint64_t x = extendInt(genBits(spec, r, index), t);
      const uint64_t s = scalarOf(r);
      switch (rc.op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc += x;
          break;
        case ReduceOp::PreMulSum:
          acc += s * x;
          break;
        case ReduceOp::Prod:
          acc *= x;
          break;
        case ReduceOp::Min:
          acc =
              d.isSigned ? (static_cast<int64_t>(x) < static_cast<int64_t>(acc) ? x : acc) : std::min(acc, x);
          break;
        case ReduceOp::Max:
          acc =
              d.isSigned ? (static_cast<int64_t>(x) > static_cast<int64_t>(acc) ? x : acc) : std::max(acc, x);
          break;
      }
    }
    if (rc.op == ReduceOp::Avg)
      acc =
          d.isSigned ? static_cast<uint64_t>(static_cast<int64_t>(acc) / n) : acc / static_cast<uint64_t>(n);
    e.bits = acc & mask;
    return e;
  }
  double acc = 0, absSum = 0;
  for (int r = 0; r < n; ++r) {
    double x = decodeFloat(genBits(spec, r, index), t);
    const double s = preMulScalar(t, rc.deviceScalar, r);
    switch (rc.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += x;
        absSum += std::fabs(x);
        break;
      case ReduceOp::PreMulSum:
        acc += s * x;
        absSum += std::fabs(s * x);
        break;
      case ReduceOp::Prod:
        acc = r == 0 ? x : acc * x;
        break;
      case ReduceOp::Min:
        acc = r == 0 ? x : std::min(acc, x);
        break;
      case ReduceOp::Max:
        acc = r == 0 ? x : std::max(acc, x);
        break;
    }
  }
  if (rc.op == ReduceOp::Prod || rc.op == ReduceOp::Min || rc.op == ReduceOp::Max) {
    e.bits = encodeExactFloat(acc, t);  // exactly representable (see the header)
    return e;
  }
  if (rc.op == ReduceOp::Avg) {
    acc /= n;
    absSum /= n;
  }
  e.exact = false;
  e.value = acc;
  e.tol = (n + 2) * d.unitRoundoff * absSum;
  return e;
}

bool matches(uint64_t gotBits, const Expected& e, DataType t) {
  const uint64_t mask = maskOf(t);
  if (e.exact) return (gotBits & mask) == (e.bits & mask);
  const double got = decodeFloat(gotBits & mask, t);
  if (std::isnan(got) || std::isinf(got)) return false;
  return std::fabs(got - e.value) <= e.tol;
}

void parallelFor(uint64_t n, const std::function<void(uint64_t, uint64_t)>& body) {
  constexpr uint64_t kSerial = 1 << 16;
  if (n <= kSerial) {
    body(0, n);
    return;
  }
  const unsigned hw = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const uint64_t chunk = (n + hw - 1) / hw;
  std::vector<std::thread> threads;
  for (unsigned k = 0; k < hw; ++k) {
    const uint64_t b = k * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    threads.emplace_back([&body, b, e] { body(b, e); });
  }
  for (auto& th : threads) th.join();
}

Comparison compareOutput(const void* p, uint64_t count, DataType t,
                         const std::function<Expected(uint64_t)>& expect) {
  const uint32_t size = dtypeInfo(t).size;
  std::vector<uint8_t> host(count * size);
  if (count != 0) MESHCOMM_CUDA_CHECK(cudaMemcpy(host.data(), p, host.size(), cudaMemcpyDeviceToHost));
  Comparison c;
  c.checked = count;
  std::mutex m;
  uint64_t firstIndex = ~0ull;
  parallelFor(count, [&](uint64_t b, uint64_t e) {
    uint64_t bad = 0, first = ~0ull;
    for (uint64_t i = b; i < e; ++i) {
      const uint64_t got = loadHost(host.data(), i, size);
      if (!matches(got, expect(i), t)) {
        if (bad++ == 0) first = i;
      }
    }
    std::lock_guard<std::mutex> lock(m);
    c.mismatches += bad;
    firstIndex = std::min(firstIndex, first);
  });
  if (c.mismatches != 0) {
    const Expected e = expect(firstIndex);
    const uint64_t got = loadHost(host.data(), firstIndex, size);
    c.first =
        detail::concat("first at element ", firstIndex, ": got ", describeElement(got, t), ", expected ",
                       e.exact ? describeElement(e.bits, t) : detail::concat(e.value, " +- ", e.tol));
  }
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t k = 0; k < host.size(); k += 8) {
    uint64_t w = 0;
    std::memcpy(&w, host.data() + k, std::min<size_t>(8, host.size() - k));
    h = mix64(h ^ w);
  }
  c.hash = h ^ host.size();
  return c;
}

}  // namespace meshcomm::test
