// Harness of the multi-process GPU tests (one process per GPU, started by meshcomm-run).
//
// * The process state (rank layout, bootstrap, Communicator, run seed) is built once by main() and reached
//   through process() / the GpuTest fixture.
// * GpuTest keeps every rank in step: SetUp is a bootstrap barrier; TearDown drains the device, agrees with
//   every rank on who failed (one allGather, which is also the barrier before anything is freed), then frees
//   what the test handed to keep(), newest first (teardown order: drain -> barrier -> unmap peers -> free).
//   A rank that cannot reach that agreement (a peer died or the ranks lost step) prints why and exits 1, so
//   a broken run ends with an error instead of a hang.
// * Random data: patternByte(seed, i) is a hash; every check uses a fresh seed (dataSeed(test, src, dst,
//   iteration)) and every output is poisoned before it is written. Checks run on the GPU (BufferChecker):
//   each byte of a buffer is compared with an ExpectLayout (payload regions + poison everywhere else) and
//   mismatches are counted into a device counter that the host reads back after each check.
// * Tags: tag(k) is unique per test and k and the same on every rank (tests run in the same order
//   everywhere), so a test that fails half-way cannot leave messages that a later test would receive.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "meshcomm/comm.hpp"
#include "meshcomm/core.hpp"
#include "meshcomm/device/macros.hpp"

// Checks the launch of the kernel just above (configuration errors surface here, not at the next sync).
#define MESHCOMM_TEST_CHECK_LAUNCH() MESHCOMM_CUDA_CHECK(cudaGetLastError())

// Skips the current test (on every rank alike: worldSize is the same everywhere) below `n` ranks.
#define MESHCOMM_TEST_REQUIRE_RANKS(n)                                                    \
  do {                                                                                    \
    if (worldSize() < (n))                                                                \
      GTEST_SKIP() << "needs at least " << (n) << " ranks, running with " << worldSize(); \
  } while (0)

namespace meshcomm {
// Readable test parameter names in gtest output (found by argument-dependent lookup).
inline void PrintTo(GpuMemoryKind kind, std::ostream* os) {
  *os << (kind == GpuMemoryKind::CuMem ? "CuMem" : "CudaMalloc");
}
inline void PrintTo(Transport t, std::ostream* os) {
  *os << transportName(t);
}
}  // namespace meshcomm

namespace meshcomm::test {

// ---------------------------------------------------------------------------------------------------------
// Process state
// ---------------------------------------------------------------------------------------------------------

// Environment variables of the harness (not library variables, so not in the env registry).
constexpr const char* kEnvAllRanksOutput =
    "MESHCOMM_TEST_ALL_RANKS_OUTPUT";                                // 1: full gtest output on all ranks
constexpr const char* kEnvSeed = "MESHCOMM_TEST_SEED";               // fixed run seed (decimal or 0x..)
constexpr const char* kEnvExpectKill = "MESHCOMM_TEST_EXPECT_KILL";  // 1: the Failure* mode (test_failure.cu)

struct TestProcess {
  RankEnv rankEnv;
  std::shared_ptr<TcpBootstrap> bootstrap;
  std::unique_ptr<Communicator> comm;
  uint64_t runSeed = 0;     // chosen by rank 0 (or kEnvSeed), broadcast: identical on all ranks
  bool expectKill = false;  // kEnvExpectKill set: only the Failure* tests run
  int testIndex = -1;       // index of the running GpuTest (same sequence on every rank)
};
TestProcess& process();

// True when the harness variable `name` is set to a true value (1/true/yes/on).
bool envFlag(const char* name);
// Sets `name` to `value` unless it is already set (harness defaults, applied before the library reads them).
void setEnvDefault(const char* name, const char* value);

// main(): builds the process state, runs the tests, agrees on the result and tears down. Returns the exit
// code.
int runGpuTests(int argc, char** argv);

// ---------------------------------------------------------------------------------------------------------
// Random data and expectations (host and device)
// ---------------------------------------------------------------------------------------------------------

// SplitMix64 finaliser: a bijective 64-bit hash.
MESHCOMM_HOST_DEVICE_INLINE uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 4-byte word k of the pattern of `seed`; never zero.
MESHCOMM_HOST_DEVICE_INLINE uint32_t patternWord(uint64_t seed, uint64_t k) {
  uint32_t w = static_cast<uint32_t>(mix64(seed + k * 0xD1B54A32D192ED03ull) >> 32);
  return w != 0 ? w : 0x5A5A5A5Bu;
}
// Byte i of the pattern (little-endian bytes of the words, so word stores and byte stores agree).
MESHCOMM_HOST_DEVICE_INLINE uint8_t patternByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(patternWord(seed, i / 4) >> (8 * (i % 4)));
}

// Seed of the data `src` sends to `dst` in `iteration` of the test with seed `testSeed`; never zero.
MESHCOMM_HOST_DEVICE_INLINE uint64_t dataSeed(uint64_t testSeed, int src, int dst, uint64_t iteration) {
  uint64_t s = mix64(testSeed ^ mix64((static_cast<uint64_t>(src) << 56) ^
                                      (static_cast<uint64_t>(dst) << 48) ^ (iteration & 0xFFFFFFFFFFFFull)));
  return s | 1;
}

// A seeded host RNG (SplitMix64 stream).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++); }
  // Uniform in [lo, hi] (inclusive).
  uint64_t uniform(uint64_t lo, uint64_t hi) { return lo + next() % (hi - lo + 1); }
  // A byte that is never `avoid`.
  uint8_t byteOtherThan(uint8_t avoid) {
    uint8_t b = static_cast<uint8_t>(next());
    return b == avoid ? static_cast<uint8_t>(b ^ 0x5A) : b;
  }
  // A message size in [1, maxBytes] that favours the edges: tiny and odd sizes, powers of two, the maximum.
  uint64_t size(uint64_t maxBytes) {
    switch (next() % 8) {
      case 0:
        return uniform(1, maxBytes < 16 ? maxBytes : 16);
      case 1:
        return maxBytes;
      case 2: {
        uint64_t p = 1;
        for (uint64_t k = uniform(0, 40); k > 0 && p * 2 <= maxBytes; --k) p *= 2;
        return p;
      }
      default:
        return uniform(1, maxBytes);
    }
  }

 private:
  uint64_t state_;
};

// What a buffer must hold: pattern regions, `poison` everywhere else.
// Byte i inside region r: patternByte(seed, i - offset + patternOffset) ^ (xorSeed ? patternByte(xorSeed, ..)
// : 0).
struct ExpectRegion {
  uint64_t offset, bytes, seed, xorSeed, patternOffset;
};
constexpr int kMaxRegions = 10;
struct ExpectLayout {
  uint64_t totalBytes = 0;
  uint32_t nRegions = 0;
  uint8_t poison = 0;
  ExpectRegion regions[kMaxRegions] = {};

  ExpectLayout() = default;
  ExpectLayout(uint64_t total, uint8_t poisonByte) : totalBytes(total), poison(poisonByte) {}
  // Host: appends a region (throws if there are too many or it leaves the buffer).
  ExpectLayout& add(uint64_t offset, uint64_t bytes, uint64_t seed, uint64_t xorSeed = 0,
                    uint64_t patternOffset = 0);

  MESHCOMM_HOST_DEVICE_INLINE uint8_t expected(uint64_t i) const {
    for (uint32_t r = 0; r < nRegions; ++r) {
      const ExpectRegion& g = regions[r];
      const uint64_t j = i - g.offset;  // wraps for i < offset
      if (j < g.bytes) {
        uint8_t v = patternByte(g.seed, j + g.patternOffset);
        if (g.xorSeed != 0) v ^= patternByte(g.xorSeed, j + g.patternOffset);
        return v;
      }
    }
    return poison;
  }
};

// Device-side result of one or more checks. firstKey packs (index << 16 | got << 8 | expected) of the
// lowest mismatching index (atomicMin keeps index and bytes together).
struct CheckResult {
  unsigned long long mismatches;
  unsigned long long firstKey;
  unsigned long long checked;  // bytes compared
};

struct CheckReport {
  uint64_t mismatches = 0;
  uint64_t checked = 0;
  uint64_t firstIndex = 0;
  uint32_t firstGot = 0, firstExpected = 0;
  bool ok() const { return mismatches == 0; }
  std::string describe() const;
};

// Owns a CheckResult in device memory. launch() enqueues a check kernel; test kernels may also check in
// place through result(). collect() waits for `stream`, reads the result back and resets it.
class BufferChecker {
 public:
  BufferChecker();
  CheckResult* result() const { return static_cast<CheckResult*>(result_.data()); }
  void launch(cudaStream_t stream, const void* buffer, const ExpectLayout& layout);
  CheckReport collect(cudaStream_t stream);
  // launch + collect, and the report must show exactly `layout.totalBytes` bytes checked.
  CheckReport check(cudaStream_t stream, const void* buffer, const ExpectLayout& layout);

 private:
  void reset();
  GpuBuffer result_;
};

// Tallies the checks of a loop: the first few failures become gtest failures with their context, the rest
// only count. Loops never stop early on a data mismatch: every rank must run the same signals and waits.
class CheckTally {
 public:
  explicit CheckTally(int maxReported = 5) : maxReported_(maxReported) {}
  // Returns r.ok(); reports the failure (with `context`) if it is among the first maxReported.
  bool record(const CheckReport& r, const std::string& context);
  uint64_t checks() const { return checks_; }
  uint64_t failures() const { return failures_; }
  std::string summary() const;

 private:
  int maxReported_;
  uint64_t checks_ = 0, failures_ = 0;
};

// dst[j] = patternByte(seed, j + patternOffset) for j < bytes (any alignment).
void fillPattern(cudaStream_t stream, void* dst, uint64_t bytes, uint64_t seed, uint64_t patternOffset = 0);

// One all-pairs exchange round over slot-structured buffers (slot r of a buffer = bytes [r*slot,
// (r+1)*slot)): every rank sends `size` bytes to every peer, from its send slot `peer` at srcShift into the
// peer's receive slot `rank` at dstShift, with fresh data per (src, dst, iteration). Everything else of the
// receive buffer, the own slot included, must keep the poison byte; the send buffer outside the payloads
// holds ~poison, so a copy that reads or writes too much shows up.
struct SlotExchange {
  uint64_t slotBytes = 0;
  uint64_t size = 0, srcShift = 0, dstShift = 0;
  uint8_t poison = 0;

  // Random size in [1, maxSize], shifts in [0, maxShift], poison; slotBytes >= maxSize + maxShift.
  static SlotExchange random(Rng& rng, uint64_t slotBytes, uint64_t maxSize, uint64_t maxShift);
  // Enqueues: poison the receive buffer, fill the send buffer for this iteration.
  void prepare(cudaStream_t stream, void* send, void* recv, int world, int me, const std::vector<int>& peers,
               uint64_t testSeed, uint64_t iteration) const;
  // What the receive buffer must hold after the round.
  ExpectLayout expected(int world, int me, const std::vector<int>& peers, uint64_t testSeed,
                        uint64_t iteration) const;
  std::string describe() const;
};

#if defined(__CUDACC__)
// Compares `layout.totalBytes` bytes at `buf` with the layout; thread tid of nThreads. Call it from every
// thread of the grid (or of a block) and read the result back with BufferChecker::collect.
__device__ __forceinline__ void checkBytes(const uint8_t* buf, const ExpectLayout& layout, uint64_t tid,
                                           uint64_t nThreads, CheckResult* result) {
  unsigned long long bad = 0, firstKey = ~0ull, checked = 0;
  const uint64_t total = layout.totalBytes;
  const bool aligned = (reinterpret_cast<uintptr_t>(buf) & 3) == 0;
  for (uint64_t w = tid; w * 4 < total; w += nThreads) {
    uint32_t word = 0;
    const uint64_t base = w * 4;
    const uint32_t n = total - base >= 4 ? 4u : static_cast<uint32_t>(total - base);
    if (aligned && n == 4) {
      word = reinterpret_cast<const uint32_t*>(buf)[w];
    } else {
      for (uint32_t b = 0; b < n; ++b) word |= static_cast<uint32_t>(buf[base + b]) << (8 * b);
    }
    for (uint32_t b = 0; b < n; ++b) {
      const uint8_t got = static_cast<uint8_t>(word >> (8 * b));
      const uint8_t exp = layout.expected(base + b);
      if (got != exp) {
        ++bad;
        unsigned long long key = ((base + b) << 16) | (static_cast<unsigned long long>(got) << 8) | exp;
        if (key < firstKey) firstKey = key;
      }
    }
    checked += n;
  }
  // Reduce over the warp, then one atomic per warp (counters only: no ordering needed, the host reads
  // them after the kernel has completed).
  for (int d = 16; d > 0; d /= 2) {
    bad += __shfl_down_sync(0xffffffffu, bad, d);
    checked += __shfl_down_sync(0xffffffffu, checked, d);
    unsigned long long other = __shfl_down_sync(0xffffffffu, firstKey, d);
    if (other < firstKey) firstKey = other;
  }
  if ((threadIdx.x & 31) == 0) {
    if (bad != 0) {
      atomicAdd(&result->mismatches, bad);
      atomicMin(&result->firstKey, firstKey);
    }
    atomicAdd(&result->checked, checked);
  }
}
#endif

// ---------------------------------------------------------------------------------------------------------
// Small RAII helpers
// ---------------------------------------------------------------------------------------------------------

class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A device copy of a host array of trivially copyable T (device handles, peer lists).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host)
      : buffer_(std::max<size_t>(host.size(), 1) * sizeof(T)), size_(host.size()) {
    if (!host.empty()) copyToDevice(buffer_.data(), host.data(), host.size() * sizeof(T));
  }
  T* data() const { return static_cast<T*>(buffer_.data()); }
  size_t size() const { return size_; }

 private:
  GpuBuffer buffer_;
  size_t size_ = 0;
};

// Sets (or unsets, value == nullptr) an environment variable for its lifetime and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Device memory of `kind` registered with the communicator.
struct RegisteredBuffer {
  GpuBuffer buffer;
  RegisteredMemory memory;
  RegisteredBuffer(Communicator& comm, size_t bytes, GpuMemoryKind kind = GpuMemoryKind::CudaMalloc);
  char* data() const { return static_cast<char*>(buffer.data()); }
  size_t size() const { return buffer.size(); }
};

const char* memoryKindName(GpuMemoryKind kind);

// Bytes of free device memory (cudaMemGetInfo), open file descriptors and resident host memory (VmRSS, bytes)
// of this process.
size_t freeDeviceMemory();
int openFileDescriptors();
size_t residentHostMemory();

// ---------------------------------------------------------------------------------------------------------
// Peer setup shared by the tests
// ---------------------------------------------------------------------------------------------------------

// Every rank but this one, ascending. Pairwise calls made in ascending peer order on every rank follow one
// global order of the pairs (by (min, max) rank), so no rank waits on a pair its peer reaches later.
std::vector<int> allPeers(const Communicator& comm);
// The partner of this rank in pairs (0,1), (2,3), ...; empty when this rank has none (odd rank out).
std::vector<int> pairPeer(const Communicator& comm);

// Up to kMaxPeers peer ranks by value, for kernels.
constexpr int kMaxPeers = 8;
struct PeerList {
  int n = 0;
  int rank[kMaxPeers] = {};
};
PeerList toPeerList(const std::vector<int>& peers);

// (pair with every peer) Connects to each peer with `tag` (ascending peer order).
std::vector<std::shared_ptr<Connection>> connectPeers(Communicator& comm, const std::vector<int>& peers,
                                                      int tag);
// (pair with every peer) Sends `local` to every peer and receives each peer's memory, with `tag`.
std::vector<RegisteredMemory> exchangeMemory(Communicator& comm, const std::vector<int>& peers,
                                             const RegisteredMemory& local, int tag);

// MemoryChannels to `peers`: channel (peer i, c) writes from `src` into peer i's `exported` memory and
// signals its own semaphore. `packetBuffer` (optional, local) is where peers' putPackets land; for LL tests
// pass the same memory as `exported`. Device handles: handles()[i * channelsPerPeer + c].
class MemoryChannelMesh {
 public:
  // (pair with every peer) Uses tags tag .. tag + 1 + channelsPerPeer.
  MemoryChannelMesh(Communicator& comm, std::vector<int> peers, const RegisteredMemory& exported,
                    const RegisteredMemory& src, int tag, int channelsPerPeer = 1,
                    const RegisteredMemory& packetBuffer = {});
  const std::vector<int>& peers() const { return peers_; }
  int channelsPerPeer() const { return channelsPerPeer_; }
  const std::vector<MemoryChannel>& channels() const { return channels_; }
  const std::vector<RegisteredMemory>& remoteMemories() const { return remote_; }
  const MemoryChannelDeviceHandle* handles() const { return handles_.data(); }
  PeerList peerList() const { return toPeerList(peers_); }

 private:
  std::vector<int> peers_;
  int channelsPerPeer_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::vector<RegisteredMemory> remote_;
  std::vector<std::shared_ptr<MemoryDevice2DeviceSemaphore>> semaphores_;
  std::vector<MemoryChannel> channels_;
  DeviceArray<MemoryChannelDeviceHandle> handles_;
};

// PortChannels to `peers` through one ProxyService: channel i copies from `src` into peer i's `exported`
// memory over the connection `connect` chose (CUDA IPC, or TCP under MESHCOMM_TRANSPORT=tcp). The proxy
// runs from construction to destruction. Device handles: handles()[i].
class PortChannelMesh {
 public:
  // (pair with every peer) Uses tags tag .. tag + 2.
  PortChannelMesh(Communicator& comm, std::vector<int> peers, const RegisteredMemory& exported,
                  const RegisteredMemory& src, int tag, size_t fifoSize = 0);
  ~PortChannelMesh();
  const std::vector<int>& peers() const { return peers_; }
  const std::vector<std::shared_ptr<Connection>>& connections() const { return connections_; }
  const PortChannelDeviceHandle* handles() const { return handles_.data(); }
  PeerList peerList() const { return toPeerList(peers_); }
  ProxyService& proxy() { return *proxy_; }

 private:
  std::vector<int> peers_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::vector<RegisteredMemory> remote_;
  std::unique_ptr<ProxyService> proxy_;
  DeviceArray<PortChannelDeviceHandle> handles_;
};

// ---------------------------------------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------------------------------------

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  Communicator& comm() const { return *process().comm; }
  Bootstrap& bootstrap() const { return *process().bootstrap; }
  int rank() const { return comm().rank(); }
  int worldSize() const { return comm().size(); }
  // A bootstrap tag unique to this test and k (k < 64); the same on every rank.
  int tag(int k) const;
  // Seed of this test: the same on every rank, different per test and run.
  uint64_t testSeed() const;
  cudaStream_t stream() const { return stream_->get(); }
  // Waits for the test stream and throws if a device wait of this process failed.
  void syncAndCheck() const;
  // A Comm of its own over a new bootstrap, on this rank's device (collective: every rank calls it), for
  // tests that change, close or fill one.
  std::unique_ptr<Comm> freshComm() const;

  // Hands an object to the fixture: it lives until TearDown, after the closing barrier (newest first).
  template <typename T, typename... Args>
  T& keep(Args&&... args) {
    auto p = std::make_shared<T>(std::forward<Args>(args)...);
    owned_.push_back(p);
    return *p;
  }

  // Hands an existing object to the fixture, like keep().
  template <typename T>
  T& adopt(std::unique_ptr<T> p) {
    std::shared_ptr<T> shared(std::move(p));
    owned_.push_back(shared);
    return *shared;
  }

 private:
  std::unique_ptr<CudaStream> stream_;
  std::vector<std::shared_ptr<void>> owned_;
};

}  // namespace meshcomm::test
