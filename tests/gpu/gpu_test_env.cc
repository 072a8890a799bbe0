#include "gpu_test_env.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

namespace meshcomm::test {

// ---------------------------------------------------------------------------------------------------------
// Process state
// ---------------------------------------------------------------------------------------------------------

TestProcess& process() {
  static TestProcess p;
  return p;
}

bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

void setEnvDefault(const char* name, const char* value) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') ::setenv(name, value, 1);
}

namespace {

// Ranks other than 0 print only failures (with their rank), so that a run's log reads like one process's.
class FailuresOnlyPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnlyPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                r.message());
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::printf("[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
      std::fflush(stdout);
    }
  }

 private:
  int rank_;
};

uint64_t parseSeed(const char* s) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (end == s || *end != '\0')
    MESHCOMM_THROW(ErrorCode::InvalidUsage, kEnvSeed, "='", s, "' is not an integer");
  return v;
}

std::string joinRanks(const std::vector<int32_t>& flags) {
  std::ostringstream os;
  bool first = true;
  for (size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] == 0) continue;
    os << (first ? "" : ",") << r;
    first = false;
  }
  return os.str();
}

[[noreturn]] void exitOutOfStep(const std::string& where, const std::string& why) {
  std::fprintf(stderr,
               "[rank %d] %s: cannot agree with the other ranks (%s); exiting with 1 so that the launcher "
               "stops the run instead of letting it hang\n",
               process().rankEnv.rank, where.c_str(), why.c_str());
  std::fflush(nullptr);
  std::_Exit(1);
}

}  // namespace

int runGpuTests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();  // listing needs no GPU and no peers

  TestProcess& p = process();
  try {
    p.rankEnv = RankEnv::fromEnvironment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshcomm GPU tests: bad rank environment: %s\n", e.what());
    return 1;
  }
  const RankEnv& env = p.rankEnv;
  const int gpus = gpuCount();
  if (gpus == 0 || gpus < env.localWorldSize) {
    const int need = std::max(env.localWorldSize, 1);
    std::printf("SKIPPED: meshcomm GPU tests need %d GPU%s, found %d\n", need, need == 1 ? "" : "s", gpus);
    return 77;
  }
  if (env.worldSize < 2) {
    std::printf(
        "SKIPPED: meshcomm GPU tests need at least 2 ranks (run: meshcomm-run -n N -- %s), found %d\n",
        argv[0], env.worldSize);
    return 77;
  }

  p.expectKill = envFlag(kEnvExpectKill);
  // Short timeouts, so that a failure on one rank becomes an error on the others, not a hang. Set before
  // the bootstrap and the Communicator read them; a value the caller set wins.
  setEnvDefault("MESHCOMM_DEVICE_TIMEOUT_MS", "20000");
  setEnvDefault("MESHCOMM_BOOTSTRAP_TIMEOUT", p.expectKill ? "15" : "60");

  try {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(env.localRank));
    p.bootstrap = TcpBootstrap::fromEnvironment();
    p.comm = std::make_unique<Communicator>(p.bootstrap, env.localRank);
    uint64_t seed = 0;
    if (p.bootstrap->rank() == 0) {
      const char* s = std::getenv(kEnvSeed);
      seed = (s && *s) ? parseSeed(s)
                       : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    }
    p.bootstrap->broadcast(&seed, sizeof(seed), 0);
    p.runSeed = seed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] meshcomm GPU tests: setup failed: %s\n", env.rank, e.what());
    return 1;
  }
  const int rank = p.comm->rank();
  const int world = p.comm->size();

  // Every rank must run the same tests in the same order: a shuffle uses the shared seed.
  if (GTEST_FLAG_GET(shuffle)) GTEST_FLAG_SET(random_seed, static_cast<int32_t>(p.runSeed % 99999) + 1);

  if (rank != 0 && !envFlag(kEnvAllRanksOutput)) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnlyPrinter(rank));
  }
  if (rank == 0) {
    std::printf(
        "meshcomm GPU tests: %d ranks, %d GPUs on this host, seed 0x%llx (%s=... to repeat), "
        "MESHCOMM_DEVICE_TIMEOUT_MS=%s, MESHCOMM_BOOTSTRAP_TIMEOUT=%s%s\n",
        world, gpus, static_cast<unsigned long long>(p.runSeed), kEnvSeed,
        std::getenv("MESHCOMM_DEVICE_TIMEOUT_MS"), std::getenv("MESHCOMM_BOOTSTRAP_TIMEOUT"),
        p.expectKill ? ", EXPECT_KILL mode" : "");
    std::fflush(stdout);
  }

  const int rc = RUN_ALL_TESTS();

  if (p.expectKill) {
    // A rank was killed on purpose: no closing collective can succeed, and tearing down the communicator
    // would wait for the dead peer. Leave at once; the OS releases everything.
    std::fflush(nullptr);
    std::_Exit(rc);
  }

  std::vector<int32_t> failed(world, 0);
  failed[rank] = rc != 0;
  try {
    p.bootstrap->allGather(failed.data(), sizeof(int32_t));
  } catch (const std::exception& e) {
    exitOutOfStep("after the last test", e.what());
  }
  const std::string failedRanks = joinRanks(failed);
  if (rank == 0) {
    if (failedRanks.empty())
      std::printf("meshcomm GPU tests: passed on all %d ranks\n", world);
    else
      std::printf("meshcomm GPU tests: FAILED on rank(s) %s\n", failedRanks.c_str());
    std::fflush(stdout);
  }
  try {
    p.comm.reset();
    p.bootstrap.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] teardown failed: %s\n", rank, e.what());
    return 1;
  }
  return failedRanks.empty() ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------------------
// Expectations and checks (host side; kernels are in gpu_test_kernels.cu)
// ---------------------------------------------------------------------------------------------------------

ExpectLayout& ExpectLayout::add(uint64_t offset, uint64_t bytes, uint64_t seed, uint64_t xorSeed,
                                uint64_t patternOffset) {
  if (nRegions >= static_cast<uint32_t>(kMaxRegions))
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "test ExpectLayout: more than ", kMaxRegions, " regions");
  if (offset + bytes > totalBytes)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "test ExpectLayout: region [", offset, ", ", offset + bytes,
                   ") leaves the buffer of ", totalBytes, " bytes");
  regions[nRegions++] = ExpectRegion{offset, bytes, seed, xorSeed, patternOffset};
  return *this;
}

std::string CheckReport::describe() const {
  std::ostringstream os;
  os << mismatches << " of " << checked << " bytes differ";
  if (mismatches != 0) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "; first at byte %llu: expected 0x%02x, got 0x%02x",
                  static_cast<unsigned long long>(firstIndex), firstExpected, firstGot);
    os << buf;
  }
  return os.str();
}

BufferChecker::BufferChecker() : result_(sizeof(CheckResult)) {
  reset();
}

void BufferChecker::reset() {
  const CheckResult init{0, ~0ull, 0};
  copyToDevice(result_.data(), &init, sizeof(init));
}

CheckReport BufferChecker::collect(cudaStream_t stream) {
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream));
  CheckResult r{};
  MESHCOMM_CUDA_CHECK(cudaMemcpy(&r, result_.data(), sizeof(r), cudaMemcpyDeviceToHost));
  reset();
  CheckReport rep;
  rep.mismatches = r.mismatches;
  rep.checked = r.checked;
  if (r.mismatches != 0) {
    rep.firstIndex = r.firstKey >> 16;
    rep.firstGot = static_cast<uint32_t>((r.firstKey >> 8) & 0xff);
    rep.firstExpected = static_cast<uint32_t>(r.firstKey & 0xff);
  }
  return rep;
}

CheckReport BufferChecker::check(cudaStream_t stream, const void* buffer, const ExpectLayout& layout) {
  launch(stream, buffer, layout);
  CheckReport rep = collect(stream);
  if (rep.checked != layout.totalBytes)
    MESHCOMM_THROW(ErrorCode::InternalError, "test checker compared ", rep.checked, " bytes instead of ",
                   layout.totalBytes);
  return rep;
}

bool CheckTally::record(const CheckReport& r, const std::string& context) {
  ++checks_;
  if (r.ok()) return true;
  if (++failures_ <= static_cast<uint64_t>(maxReported_)) {
    ADD_FAILURE() << "[rank " << process().comm->rank() << "] " << context << ": " << r.describe();
  }
  return false;
}

std::string CheckTally::summary() const {
  return detail::concat(failures_, " of ", checks_, " checks failed on rank ", process().comm->rank());
}

SlotExchange SlotExchange::random(Rng& rng, uint64_t slotBytes, uint64_t maxSize, uint64_t maxShift) {
  if (maxSize + maxShift > slotBytes)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "test SlotExchange: size ", maxSize, " + shift ", maxShift,
                   " exceed the slot of ", slotBytes, " bytes");
  SlotExchange x;
  x.slotBytes = slotBytes;
  x.size = rng.size(maxSize);
  // Half of the rounds aligned, the others at any byte offset (exercises the unaligned copy paths).
  x.srcShift = rng.next() % 2 ? 0 : rng.uniform(0, maxShift);
  x.dstShift = rng.next() % 2 ? 0 : rng.uniform(0, maxShift);
  x.poison = static_cast<uint8_t>(rng.next());
  return x;
}

void SlotExchange::prepare(cudaStream_t stream, void* send, void* recv, int world, int me,
                           const std::vector<int>& peers, uint64_t testSeed, uint64_t iteration) const {
  const uint64_t total = static_cast<uint64_t>(world) * slotBytes;
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(recv, poison, total, stream));
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(send, static_cast<uint8_t>(~poison), total, stream));
  for (int peer : peers) {
    fillPattern(stream, static_cast<char*>(send) + peer * slotBytes + srcShift, size,
                dataSeed(testSeed, me, peer, iteration));
  }
}

ExpectLayout SlotExchange::expected(int world, int me, const std::vector<int>& peers, uint64_t testSeed,
                                    uint64_t iteration) const {
  ExpectLayout layout(static_cast<uint64_t>(world) * slotBytes, poison);
  for (int peer : peers)
    layout.add(peer * slotBytes + dstShift, size, dataSeed(testSeed, peer, me, iteration));
  return layout;
}

std::string SlotExchange::describe() const {
  return detail::concat("size ", size, ", srcShift ", srcShift, ", dstShift ", dstShift);
}

// ---------------------------------------------------------------------------------------------------------
// RAII helpers
// ---------------------------------------------------------------------------------------------------------

CudaStream::CudaStream() {
  MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
CudaStream::~CudaStream() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* v = std::getenv(name)) old_ = std::string(v);
  if (value != nullptr)
    ::setenv(name, value, 1);
  else
    ::unsetenv(name);
}
ScopedEnv::~ScopedEnv() {
  if (old_)
    ::setenv(name_.c_str(), old_->c_str(), 1);
  else
    ::unsetenv(name_.c_str());
}

RegisteredBuffer::RegisteredBuffer(Communicator& comm, size_t bytes, GpuMemoryKind kind)
    : buffer(bytes, kind), memory(comm.registerMemory(buffer.data(), bytes)) {}

const char* memoryKindName(GpuMemoryKind kind) {
  return kind == GpuMemoryKind::CuMem ? "CuMem" : "CudaMalloc";
}

size_t freeDeviceMemory() {
  size_t freeBytes = 0, totalBytes = 0;
  MESHCOMM_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  return freeBytes;
}

size_t residentHostMemory() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

int openFileDescriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

// ---------------------------------------------------------------------------------------------------------
// Peer setup
// ---------------------------------------------------------------------------------------------------------

std::vector<int> allPeers(const Communicator& comm) {
  std::vector<int> peers;
  for (int r = 0; r < comm.size(); ++r)
    if (r != comm.rank()) peers.push_back(r);
  return peers;
}

std::vector<int> pairPeer(const Communicator& comm) {
  const int partner = comm.rank() ^ 1;
  if (partner < comm.size()) return {partner};
  return {};
}

PeerList toPeerList(const std::vector<int>& peers) {
  if (peers.size() > static_cast<size_t>(kMaxPeers))
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "GPU tests support at most ", kMaxPeers, " peers, got ",
                   peers.size());
  PeerList l;
  l.n = static_cast<int>(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) l.rank[i] = peers[i];
  return l;
}

std::vector<std::shared_ptr<Connection>> connectPeers(Communicator& comm, const std::vector<int>& peers,
                                                      int tag) {
  std::vector<std::shared_ptr<Connection>> conns;
  for (int peer : peers) conns.push_back(comm.connect(peer, tag));
  return conns;
}

std::vector<RegisteredMemory> exchangeMemory(Communicator& comm, const std::vector<int>& peers,
                                             const RegisteredMemory& local, int tag) {
  for (int peer : peers) comm.sendMemory(local, peer, tag);
  std::vector<RegisteredMemory> remote;
  for (int peer : peers) remote.push_back(comm.recvMemory(peer, tag));
  return remote;
}

MemoryChannelMesh::MemoryChannelMesh(Communicator& comm, std::vector<int> peers,
                                     const RegisteredMemory& exported, const RegisteredMemory& src, int tag,
                                     int channelsPerPeer, const RegisteredMemory& packetBuffer)
    : peers_(std::move(peers)), channelsPerPeer_(channelsPerPeer) {
  connections_ = connectPeers(comm, peers_, tag);
  remote_ = exchangeMemory(comm, peers_, exported, tag + 1);
  std::vector<MemoryChannelDeviceHandle> handles;
  for (size_t i = 0; i < peers_.size(); ++i) {
    for (int c = 0; c < channelsPerPeer_; ++c) {
      auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, connections_[i], tag + 2 + c);
      semaphores_.push_back(sem);
      channels_.emplace_back(sem, remote_[i], src, packetBuffer);
      handles.push_back(channels_.back().deviceHandle());
    }
  }
  handles_ = DeviceArray<MemoryChannelDeviceHandle>(handles);
}

PortChannelMesh::PortChannelMesh(Communicator& comm, std::vector<int> peers, const RegisteredMemory& exported,
                                 const RegisteredMemory& src, int tag, size_t fifoSize)
    : peers_(std::move(peers)) {
  connections_ = connectPeers(comm, peers_, tag);
  remote_ = exchangeMemory(comm, peers_, exported, tag + 1);
  proxy_ = std::make_unique<ProxyService>(comm, fifoSize);
  const MemoryId srcId = proxy_->addMemory(src);
  std::vector<PortChannelDeviceHandle> handles;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const SemaphoreId sem = proxy_->buildAndAddSemaphore(connections_[i], tag + 2);
    const MemoryId dstId = proxy_->addMemory(remote_[i]);
    handles.push_back(proxy_->portChannel(sem, dstId, srcId).deviceHandle());
  }
  handles_ = DeviceArray<PortChannelDeviceHandle>(handles);
  proxy_->startProxy();
}

PortChannelMesh::~PortChannelMesh() {
  if (proxy_) proxy_->stopProxy();
}

// ---------------------------------------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------------------------------------

void GpuTest::SetUp() {
  TestProcess& p = process();
  ++p.testIndex;
  if (p.expectKill) GTEST_SKIP() << kEnvExpectKill << " is set: only the Failure* tests run in this mode";
  stream_ = std::make_unique<CudaStream>();
  bootstrap().barrier();
}

void GpuTest::TearDown() {
  TestProcess& p = process();
  if (p.expectKill) {
    owned_.clear();
    stream_.reset();
    return;
  }
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();

  bool failed = HasFailure();
  // Drain: no kernel of this test may still touch memory that is freed below.
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    ADD_FAILURE() << "cudaDeviceSynchronize after the test: " << cudaGetErrorString(err);
    failed = true;
  }
  try {
    comm().checkDeviceError();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "device error the test did not handle: " << e.what();
    failed = true;
  }

  // Agree on who failed; this is also the barrier before any rank unmaps or frees.
  std::vector<int32_t> flags(worldSize(), 0);
  flags[rank()] = failed ? 1 : 0;
  try {
    bootstrap().allGather(flags.data(), sizeof(int32_t));
  } catch (const std::exception& e) {
    exitOutOfStep(name, e.what());
  }
  const std::string failedRanks = joinRanks(flags);
  if (!failedRanks.empty()) {
    if (rank() == 0 && !failed) ADD_FAILURE() << name << " failed on rank(s) " << failedRanks;
    try {
      comm().clearDeviceError();  // every rank agreed to go on with the next test
    } catch (const std::exception& e) {
      ADD_FAILURE() << "clearDeviceError: " << e.what();
    }
  }
  while (!owned_.empty()) owned_.pop_back();  // newest first: channels and peer mappings before buffers
  stream_.reset();
}

int GpuTest::tag(int k) const {
  if (k < 0 || k >= 64) MESHCOMM_THROW(ErrorCode::InvalidUsage, "test tag index ", k, " out of [0, 64)");
  const int64_t t = (static_cast<int64_t>(process().testIndex) + 1) * 65536 + k * 1024;
  // Communicator tags must stay below 2^26 (internal tag spaces); helpers use up to 1024 tags from t.
  if (t + 1024 > (int64_t{1} << 26))
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "too many tests for the tag space");
  return static_cast<int>(t);
}

uint64_t GpuTest::testSeed() const {
  return mix64(process().runSeed ^ mix64(static_cast<uint64_t>(process().testIndex) + 0x1234));
}

std::unique_ptr<Comm> GpuTest::freshComm() const {
  UniqueId id;
  if (rank() == 0) id = TcpBootstrap::createUniqueId(worldSize());
  bootstrap().broadcast(id.bytes.data(), id.bytes.size(), 0);
  CommConfig cfg;
  cfg.cudaDevice = comm().cudaDevice();
  return std::make_unique<Comm>(std::make_shared<TcpBootstrap>(rank(), worldSize(), id), cfg);
}

void GpuTest::syncAndCheck() const {
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  comm().checkDeviceError();
}

}  // namespace meshcomm::test
