// RegisteredMemory internals on the CPU: descriptor round trip and validation of bytes from the network,
// the local registry, internal tag spaces, the env registry vs docs/env.md. GPU parts skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/communicator_impl.hpp"
#include "core/fd_broker.hpp"
#include "core/peer_mapping_cache.hpp"
#include "core/registered_memory_impl.hpp"
#include "meshcomm/communicator.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/memory_channel.hpp"

using namespace meshcomm;

namespace {

MemoryDescriptor sampleDescriptor(MemoryKind kind = MemoryKind::DeviceCuMem) {
  MemoryDescriptor d = MemoryDescriptor::make();
  d.ownerRank = 3;
  d.deviceIndex = 5;
  d.hostId = 0x1122334455667788ull;
  d.ownerPid = 4242;
  d.id = 17;
  d.size = 1000;
  d.offsetFromBase = 24;
  d.baseSize = 2u << 20;
  d.ownerBase = 0x7f0000000000ull;
  d.kind = static_cast<uint8_t>(kind);
  if (kind == MemoryKind::DeviceCuMem) {
    d.exportId = 99;
    std::strcpy(d.brokerName, "meshcomm-fdb-1000-4242-0123456789abcdef");
  } else if (kind == MemoryKind::DeviceCudaMalloc) {
    for (size_t i = 0; i < sizeof(d.ipcHandle.reserved); ++i)
      d.ipcHandle.reserved[i] = static_cast<char>(i * 7 + 1);
  }
  return d;
}

// Expects `fn` to throw Error(code) whose text contains `part`.
void expectError(const std::function<void()>& fn, ErrorCode code, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

}  // namespace

// ---- descriptor --------------------------------------------------------------------------------------

TEST(MemoryDescriptor, RoundTrip) {
  for (MemoryKind kind : {MemoryKind::DeviceCudaMalloc, MemoryKind::DeviceCuMem, MemoryKind::Host}) {
    MemoryDescriptor d = sampleDescriptor(kind);
    std::vector<char> bytes = d.toBytes();
    ASSERT_EQ(bytes.size(), sizeof(MemoryDescriptor));
    MemoryDescriptor e = MemoryDescriptor::fromBytes(bytes.data(), bytes.size(), "test");
    EXPECT_EQ(std::memcmp(&d, &e, sizeof(d)), 0);
    EXPECT_EQ(e.memoryKind(), kind);
    EXPECT_EQ(e.ownerRank, 3);
    EXPECT_EQ(e.hostId, 0x1122334455667788ull);
    EXPECT_EQ(e.offsetFromBase, 24u);
  }
}

TEST(MemoryDescriptor, WrongSizeIsRemoteError) {
  std::vector<char> bytes = sampleDescriptor().toBytes();
  const std::string ctx = "rank 1: recvMemory from peer 0 (tag 5)";
  expectError([&] { MemoryDescriptor::fromBytes(bytes.data(), bytes.size() - 1, ctx); },
              ErrorCode::RemoteError, ctx);
  expectError([&] { MemoryDescriptor::fromBytes(bytes.data(), 0, ctx); }, ErrorCode::RemoteError,
              "has 0 bytes");
  expectError([&] { MemoryDescriptor::fromBytes(nullptr, 0, ctx); }, ErrorCode::RemoteError, "expected 224");
  bytes.push_back(0);
  expectError([&] { MemoryDescriptor::fromBytes(bytes.data(), bytes.size(), ctx); }, ErrorCode::RemoteError,
              "has 225 bytes");
}

TEST(MemoryDescriptor, CorruptedFieldsAreRemoteErrors) {
  struct Case {
    const char* expect;
    std::function<void(MemoryDescriptor&)> corrupt;
  };
  const std::vector<Case> cases = {
      {"bad magic", [](MemoryDescriptor& d) { d.magic ^= 1; }},
      {"version 2", [](MemoryDescriptor& d) { d.version = 2; }},
      {"declares 100 bytes", [](MemoryDescriptor& d) { d.structBytes = 100; }},
      {"unknown memory kind 0", [](MemoryDescriptor& d) { d.kind = 0; }},
      {"unknown memory kind 9", [](MemoryDescriptor& d) { d.kind = 9; }},
      {"negative owner rank", [](MemoryDescriptor& d) { d.ownerRank = -1; }},
      {"negative device index", [](MemoryDescriptor& d) { d.deviceIndex = -2; }},
      {"registration id 0", [](MemoryDescriptor& d) { d.id = 0; }},
      {"size 0", [](MemoryDescriptor& d) { d.size = 0; }},
      {"exceeds its allocation", [](MemoryDescriptor& d) { d.offsetFromBase = d.baseSize + 1; }},
      {"exceeds its allocation", [](MemoryDescriptor& d) { d.size = d.baseSize - d.offsetFromBase + 1; }},
      {"exceeds its allocation",
       [](MemoryDescriptor& d) {
         d.offsetFromBase = 8;
         d.size = UINT64_MAX - 4;  // offset + size wraps
       }},
      {"overflows", [](MemoryDescriptor& d) { d.ownerBase = UINT64_MAX - 10; }},
      {"without an export id", [](MemoryDescriptor& d) { d.exportId = 0; }},
      {"without an fd broker name",
       [](MemoryDescriptor& d) { std::memset(d.brokerName, 0, sizeof(d.brokerName)); }},
      {"not terminated", [](MemoryDescriptor& d) { std::memset(d.brokerName, 'a', sizeof(d.brokerName)); }},
  };
  const std::string ctx = "rank 2: recvMemory from peer 7 (tag 1)";
  for (const auto& c : cases) {
    MemoryDescriptor d = sampleDescriptor();
    c.corrupt(d);
    std::vector<char> bytes = d.toBytes();
    try {
      MemoryDescriptor::fromBytes(bytes.data(), bytes.size(), ctx);
      ADD_FAILURE() << "accepted a descriptor with: " << c.expect;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      EXPECT_NE(std::string(e.what()).find(ctx), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

TEST(MemoryDescriptor, RandomCorruptionIsRejectedOrConsistent) {
  std::mt19937_64 rng(12345);
  int rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    MemoryDescriptor d = sampleDescriptor(iter % 2 ? MemoryKind::DeviceCuMem : MemoryKind::DeviceCudaMalloc);
    std::vector<char> bytes = d.toBytes();
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      MemoryDescriptor e = MemoryDescriptor::fromBytes(bytes.data(), bytes.size(), "fuzz");
      // Whatever is accepted satisfies the invariants the importer relies on.
      EXPECT_GT(e.size, 0u);
      EXPECT_LE(e.offsetFromBase + e.size, e.baseSize);
      EXPECT_GE(e.ownerRank, 0);
      EXPECT_NE(std::memchr(e.brokerName, '\0', sizeof(e.brokerName)), nullptr);
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

// ---- RegisteredMemory / registry (no GPU) ------------------------------------------------------------

TEST(RegisteredMemory, EmptyHandle) {
  RegisteredMemory m;
  EXPECT_FALSE(m);
  EXPECT_EQ(m.data(), nullptr);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.rank(), -1);
  EXPECT_FALSE(m.isLocal());
  EXPECT_FALSE(m.isMapped());
  EXPECT_EQ(m.id(), 0u);
  expectError([&] { (void)m.kind(); }, ErrorCode::InvalidUsage, "empty RegisteredMemory");
}

TEST(RegisteredMemory, LocalAndRemoteImpls) {
  auto registry = std::make_shared<LocalRegistry>(3);
  char buffer[64];
  MemoryDescriptor d = sampleDescriptor(MemoryKind::Host);
  d.id = registry->add({buffer, sizeof(buffer), MemoryKind::Host});
  d.size = sizeof(buffer);
  d.offsetFromBase = 0;
  d.baseSize = sizeof(buffer);
  {
    RegisteredMemory local(std::make_shared<RegisteredMemory::Impl>(d, buffer, registry, false, 0, nullptr));
    RegisteredMemory copy = local;  // copies share one registration
    EXPECT_TRUE(local.isLocal());
    EXPECT_TRUE(local.isMapped());
    EXPECT_EQ(local.data(), buffer);
    EXPECT_EQ(local.size(), sizeof(buffer));
    EXPECT_EQ(local.rank(), 3);
    EXPECT_EQ(local.kind(), MemoryKind::Host);
    EXPECT_EQ(local.id(), d.id);
    EXPECT_EQ(local.impl()->serialize(), d.toBytes());
    EXPECT_EQ(registry->liveCount(), 1u);
    local = RegisteredMemory();
    EXPECT_EQ(registry->liveCount(), 1u);

    std::vector<char> wire = copy.impl()->serialize();
    MemoryDescriptor rd = MemoryDescriptor::fromBytes(wire.data(), wire.size(), "test");
    RegisteredMemory remote(std::make_shared<RegisteredMemory::Impl>(rd, nullptr, nullptr));
    EXPECT_FALSE(remote.isLocal());
    EXPECT_FALSE(remote.isMapped());
    EXPECT_EQ(remote.data(), nullptr);
    EXPECT_EQ(remote.id(), d.id);
    EXPECT_EQ(remote.rank(), 3);
    EXPECT_EQ(remote.size(), sizeof(buffer));
  }
  EXPECT_EQ(registry->liveCount(), 0u) << "the last copy of a local registration unregisters it";
}

TEST(LocalRegistry, AddFindRemove) {
  LocalRegistry r(0);
  char a[8], b[16];
  uint64_t ia = r.add({a, sizeof(a), MemoryKind::Host});
  uint64_t ib = r.add({b, sizeof(b), MemoryKind::DeviceCudaMalloc});
  EXPECT_GT(ia, 0u);
  EXPECT_NE(ia, ib);
  auto va = r.find(ia);
  ASSERT_TRUE(va.has_value());
  EXPECT_EQ(va->ptr, a);
  EXPECT_EQ(va->size, sizeof(a));
  EXPECT_EQ(r.find(ib)->kind, MemoryKind::DeviceCudaMalloc);
  EXPECT_FALSE(r.find(12345).has_value());
  r.remove(ia);
  r.remove(ia);
  EXPECT_FALSE(r.find(ia).has_value());
  EXPECT_EQ(r.liveCount(), 1u);
  uint64_t ic = r.add({a, sizeof(a), MemoryKind::Host});
  EXPECT_NE(ic, ia) << "ids are never reused";
}

TEST(InternalTag, SpacesDoNotOverlap) {
  using internal::TagSpace;
  EXPECT_EQ(internal::internalTag(TagSpace::MemorySemaphore, 0, "t", 0, 1), internal::kInternalTagBase);
  std::set<int> seen;
  for (TagSpace s : {TagSpace::MemorySemaphore, TagSpace::HostSemaphore, TagSpace::CudaIpcConnection,
                     TagSpace::TcpConnection, TagSpace::Proxy}) {
    for (int tag : {0, 1, 7, (1 << internal::kTagSpaceBits) - 1}) {
      int t = internal::internalTag(s, tag, "t", 0, 1);
      EXPECT_GE(t, internal::kInternalTagBase);
      EXPECT_TRUE(seen.insert(t).second) << "duplicate internal tag " << t;
    }
  }
  expectError([] { internal::internalTag(TagSpace::HostSemaphore, -1, "Host2DeviceSemaphore", 2, 5); },
              ErrorCode::InvalidUsage, "rank 2: Host2DeviceSemaphore with peer 5: tag -1 out of range");
  expectError([] { internal::internalTag(TagSpace::HostSemaphore, 1 << internal::kTagSpaceBits, "x", 0, 1); },
              ErrorCode::InvalidUsage, "out of range");
}

// ---- env registry vs docs ----------------------------------------------------------------------------

TEST(EnvRegistry, DocsListEveryVariable) {
  const std::string path = std::string(MESHCOMM_SOURCE_DIR) + "/docs/env.md";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  struct Row {
    std::string type, def;
  };
  std::map<std::string, Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `MESHCOMM_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(trim(cell));
    ASSERT_GE(cells.size(), 4u) << "malformed row in docs/env.md: " << line;
    std::string name = cells[0];
    ASSERT_TRUE(name.size() > 2 && name.front() == '`' && name.back() == '`') << line;
    name = name.substr(1, name.size() - 2);
    EXPECT_TRUE(rows.emplace(name, Row{cells[1], cells[2]}).second) << name << " listed twice in docs/env.md";
  }
  std::set<std::string> declared;
  for (const auto& v : envRegistry()) {
    declared.insert(v.name);
    auto it = rows.find(v.name);
    if (it == rows.end()) {
      ADD_FAILURE() << v.name << " is declared in src/base/env.cc but missing from docs/env.md";
      continue;
    }
    const char* type = v.type == EnvType::Int ? "int" : v.type == EnvType::Bool ? "bool" : "string";
    EXPECT_EQ(it->second.type, type) << "type of " << v.name << " in docs/env.md";
    const std::string def =
        *v.defaultValue ? std::string("`") + v.defaultValue + "`" : std::string("(unset)");
    EXPECT_EQ(it->second.def, def) << "default of " << v.name << " in docs/env.md";
  }
  for (const auto& kv : rows) {
    EXPECT_TRUE(declared.count(kv.first))
        << kv.first << " is listed in docs/env.md but not declared in src/base/env.cc";
  }
}

// ---- GPU parts (skip without a GPU) ------------------------------------------------------------------

TEST(GpuUtils, GpuCountNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = gpuCount());
  EXPECT_GE(n, 0);
  // Without a driver the runtime reports its initialisation failure on every call; with one, gpuCount
  // leaves no error behind.
  if (n > 0) EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "gpuCount must leave no error behind";
}

namespace {

// A one-rank bootstrap: send() to itself queues, recv() pops (exact sizes, as the real one).
class SelfBootstrap : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int nRanksPerNode() const override { return 1; }
  int localRank() const override { return 0; }
  uint64_t hostId(int) const override { return 0xabcdefull; }
  void send(const void* data, size_t bytes, int peer, int tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[tag].emplace_back(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  }
  void recv(void* data, size_t bytes, int peer, int tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& q = queues_[tag];
    if (q.empty()) MESHCOMM_THROW(ErrorCode::Timeout, "SelfBootstrap: nothing sent on tag ", tag);
    if (q.front().size() != bytes) MESHCOMM_THROW(ErrorCode::RemoteError, "SelfBootstrap: size mismatch");
    std::memcpy(data, q.front().data(), bytes);
    q.pop_front();
  }
  void allGather(void*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}

 private:
  std::mutex mu_;
  std::map<int, std::deque<std::vector<char>>> queues_;
};

#define SKIP_WITHOUT_GPU() \
  if (gpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine"

}  // namespace

TEST(GpuUtils, BuffersAreZeroed) {
  SKIP_WITHOUT_GPU();
  for (GpuMemoryKind kind : {GpuMemoryKind::CudaMalloc, GpuMemoryKind::CuMem}) {
    GpuBuffer b(3000, kind);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), 3000u);
    std::vector<char> host(3000, 1);
    ASSERT_EQ(cudaMemcpy(host.data(), b.data(), 3000, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::count(host.begin(), host.end(), 0), 3000);
    GpuBuffer moved(std::move(b));
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_NE(moved.data(), nullptr);
  }
  HostMappedBuffer h(100);
  ASSERT_NE(h.host(), nullptr);
  ASSERT_NE(h.device(), nullptr);
  EXPECT_EQ(std::count(static_cast<char*>(h.host()), static_cast<char*>(h.host()) + 100, 0), 100);
}

// copyToDevice returns once the device holds the bytes: a copy on another non-blocking stream, enqueued right
// after it, reads every one of them (64 MiB from pageable memory, where cudaMemcpy returns before its DMA
// lands). Fresh random contents.
TEST(GpuUtils, CopyToDeviceIsCompleteForEveryStream) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kWords = (64u << 20) / sizeof(uint32_t);
  std::mt19937 rng(std::random_device{}());
  std::vector<uint32_t> host(kWords);
  for (uint32_t& w : host) w = static_cast<uint32_t>(rng());
  GpuBuffer src(kWords * sizeof(uint32_t)), dst(kWords * sizeof(uint32_t));
  copyToDevice(src.data(), host.data(), kWords * sizeof(uint32_t));
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dst.data(), src.data(), kWords * sizeof(uint32_t), cudaMemcpyDeviceToDevice, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  std::vector<uint32_t> back(kWords);
  ASSERT_EQ(cudaMemcpy(back.data(), dst.data(), kWords * sizeof(uint32_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < kWords; ++i) wrong += back[i] != host[i];
  EXPECT_EQ(wrong, 0u);
}

TEST(CommunicatorGpu, RegisterKindsAndErrors) {
  SKIP_WITHOUT_GPU();
  Communicator comm(std::make_shared<SelfBootstrap>(), 0);
  GpuBuffer dev(1 << 20, GpuMemoryKind::CudaMalloc);
  GpuBuffer vmm(1 << 20, GpuMemoryKind::CuMem);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 4096), cudaSuccess);
  std::vector<char> pageable(4096);

  RegisteredMemory a = comm.registerMemory(static_cast<char*>(dev.data()) + 256, 1000);
  EXPECT_EQ(a.kind(), MemoryKind::DeviceCudaMalloc);
  EXPECT_EQ(a.impl()->descriptor().offsetFromBase, 256u);
  EXPECT_TRUE(internal::findLocalMemory(comm, a.id()).has_value());

  const size_t brokerBefore = FdBroker::instance().publishedCount();
  RegisteredMemory b = comm.registerMemory(vmm.data(), 4096);
  RegisteredMemory b2 = comm.registerMemory(static_cast<char*>(vmm.data()) + 4096, 4096);
  EXPECT_EQ(b.kind(), MemoryKind::DeviceCuMem);
  EXPECT_EQ(b.impl()->descriptor().exportId, b2.impl()->descriptor().exportId) << "one export per allocation";
  EXPECT_EQ(comm.impl().registry->exportCount(), 1u);
  EXPECT_EQ(FdBroker::instance().publishedCount(), brokerBefore + 1);
  int fd = FdBroker::fetch(b.impl()->descriptor().brokerName, b.impl()->descriptor().exportId, 5.0);
  EXPECT_GE(fd, 0);
  ::close(fd);
  b = RegisteredMemory();
  EXPECT_EQ(FdBroker::instance().publishedCount(), brokerBefore + 1);
  b2 = RegisteredMemory();
  EXPECT_EQ(FdBroker::instance().publishedCount(), brokerBefore) << "last registration withdraws the export";
  EXPECT_EQ(comm.impl().registry->exportCount(), 0u);

  RegisteredMemory c = comm.registerMemory(pinned, 4096);
  EXPECT_EQ(c.kind(), MemoryKind::Host);

  expectError([&] { comm.registerMemory(pageable.data(), pageable.size()); }, ErrorCode::InvalidUsage,
              "pageable host memory");
  expectError([&] { comm.registerMemory(nullptr, 8); }, ErrorCode::InvalidUsage, "null pointer");
  expectError([&] { comm.registerMemory(dev.data(), (1 << 20) + 1); }, ErrorCode::InvalidUsage,
              "extends past the end");

  // Sending to ourselves: same process, so the pointer is used directly.
  comm.sendMemory(a, 0, 3);
  RegisteredMemory back = comm.recvMemory(0, 3);
  EXPECT_FALSE(back.isLocal());
  EXPECT_TRUE(back.isMapped());
  EXPECT_EQ(back.data(), a.data());
  comm.sendMemory(c, 0, 4);
  EXPECT_FALSE(comm.recvMemory(0, 4).isMapped()) << "host memory is never mapped for peers";

  auto t1 = comm.allocateToken();
  auto t2 = comm.allocateToken();
  EXPECT_EQ(t1.pool.id(), t2.pool.id());
  EXPECT_EQ(t2.offset, t1.offset + 8);
  EXPECT_NE(comm.allocateCounter(), comm.allocateCounter());

  SpinContext s = comm.spinContext(0);
  EXPECT_NE(s.report, nullptr);
  EXPECT_EQ(s.rank, 0);
  EXPECT_NO_THROW(comm.checkDeviceError());
  auto* report = comm.impl().hostReport();
  report->op = static_cast<uint32_t>(DeviceOp::SemaphoreWait);
  report->rank = 0;
  report->peer = 1;
  report->expected = 5;
  report->observed = 4;
  report->waitedNs = 2500000000ull;
  report->aborted = 1;
  expectError(
      [&] { comm.checkDeviceError(); }, ErrorCode::Timeout,
      "rank 0: device SemaphoreWait waiting for peer 1 timed out after 2500.0 ms (expected 5, observed 4)");
  comm.clearDeviceError();
  EXPECT_NO_THROW(comm.checkDeviceError());
  cudaFreeHost(pinned);
}
