// Kernels of the GPU test harness: pattern fill and buffer check (see gpu_test_env.hpp).
#include "gpu_test_env.hpp"

namespace meshcomm::test {
namespace {

constexpr int kThreads = 512;

int gridFor(uint64_t items) {
  const uint64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks == 0 ? 1 : (blocks < 1024 ? blocks : 1024));
}

__global__ void fillPatternKernel(uint8_t* dst, uint64_t bytes, uint64_t seed, uint64_t patternOffset) {
  const uint64_t tid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t n = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  if ((reinterpret_cast<uintptr_t>(dst) & 3) == 0 && (patternOffset & 3) == 0) {
    auto* w = reinterpret_cast<uint32_t*>(dst);
    const uint64_t words = bytes / 4;
    for (uint64_t k = tid; k < words; k += n) w[k] = patternWord(seed, k + patternOffset / 4);
    for (uint64_t i = words * 4 + tid; i < bytes; i += n) dst[i] = patternByte(seed, i + patternOffset);
  } else {
    for (uint64_t i = tid; i < bytes; i += n) dst[i] = patternByte(seed, i + patternOffset);
  }
}

__global__ void checkKernel(const uint8_t* buf, ExpectLayout layout, CheckResult* result) {
  const uint64_t tid = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  checkBytes(buf, layout, tid, static_cast<uint64_t>(gridDim.x) * blockDim.x, result);
}

}  // namespace

void fillPattern(cudaStream_t stream, void* dst, uint64_t bytes, uint64_t seed, uint64_t patternOffset) {
  if (bytes == 0) return;
  fillPatternKernel<<<gridFor(bytes / 4 + 1), kThreads, 0, stream>>>(static_cast<uint8_t*>(dst), bytes, seed,
                                                                     patternOffset);
  MESHCOMM_TEST_CHECK_LAUNCH();
}

void BufferChecker::launch(cudaStream_t stream, const void* buffer, const ExpectLayout& layout) {
  checkKernel<<<gridFor(layout.totalBytes / 4 + 1), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(buffer), layout, result());
  MESHCOMM_TEST_CHECK_LAUNCH();
}

}  // namespace meshcomm::test
