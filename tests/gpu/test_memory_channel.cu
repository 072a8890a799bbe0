// MemoryChannel, LL packets, semaphore epochs, registration and device timeouts across GPUs.
//
// Every data check compares against fresh random data (patternByte of a per-(src, dst, iteration) seed),
// with every output poisoned before it is written; checks run on the GPU and count mismatching bytes.
#include <chrono>
#include <cstring>

#include "gpu_test_env.hpp"
#include "meshcomm/device.hpp"

namespace meshcomm::test {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------------------

// One round of a ping-pong between two ranks over one channel whose src memory is [recv | send] (each
// `region` bytes) and whose dst is the peer's same buffer. The initiator sends pattern(seedPing); the
// responder checks it, answers ping ^ pattern(seedPong); the initiator checks the answer. Both re-poison
// their receive region before their next signal. One block (blockDim a multiple of 32).
__global__ void pingPongRoundKernel(MemoryChannelDeviceHandle ch, bool initiator, uint64_t size,
                                    uint64_t region, uint64_t seedPing, uint64_t seedPong,
                                    ExpectLayout expect, uint8_t poison, CheckResult* result) {
  __shared__ bool ok;
  auto* recv = static_cast<uint8_t*>(ch.src);
  uint8_t* send = recv + region;
  const uint32_t tid = threadIdx.x, n = blockDim.x;
  if (initiator) {
    for (uint64_t j = tid; j < size; j += n) send[j] = patternByte(seedPing, j);
    __syncthreads();  // the fill (all threads) is complete before any thread copies it
    ch.put(0, region, size, tid, n);
    __syncthreads();  // every thread's stores precede the release in signal()
    if (tid == 0) {
      ch.signal();     // release: the ping is visible to the peer after its wait
      ok = ch.wait();  // acquire: the pong is visible here
    }
    __syncthreads();  // the other threads read after thread 0's acquire
    if (!ok) return;
    checkBytes(recv, expect, tid, n, result);
  } else {
    if (tid == 0) ok = ch.wait();  // acquire: the ping is visible here
    __syncthreads();
    if (!ok) return;
    checkBytes(recv, expect, tid, n, result);
    for (uint64_t j = tid; j < size; j += n) send[j] = recv[j] ^ patternByte(seedPong, j);
    __syncthreads();  // the answer is built before the copy reads it
    ch.put(0, region, size, tid, n);
  }
  __syncthreads();  // all reads of recv are done before it is poisoned
  for (uint64_t j = tid; j < region; j += n) recv[j] = poison;
  __syncthreads();                          // the poison and the pong stores precede the release below
  if (!initiator && tid == 0) ch.signal();  // release: pong visible, my receive region re-poisoned
  // The initiator's poison is ordered before its next round's signal by that round's __syncthreads + release.
}

// One all-pairs put round: block b exchanges with peer b through channel b (see SlotExchange).
__global__ void memoryExchangeKernel(const MemoryChannelDeviceHandle* chans, PeerList peers, int me,
                                     uint64_t slot, uint64_t size, uint64_t srcShift, uint64_t dstShift) {
  __shared__ bool ok;
  MemoryChannelDeviceHandle ch = chans[blockIdx.x];
  const int peer = peers.rank[blockIdx.x];
  if (threadIdx.x == 0) {
    ch.signal();     // release: my receive buffer is poisoned (stream order before this kernel)
    ok = ch.wait();  // acquire: the peer's receive buffer is poisoned; my stores may land there now
  }
  __syncthreads();
  if (!ok) return;
  ch.put(me * slot + dstShift, peer * slot + srcShift, size, threadIdx.x, blockDim.x);
  __syncthreads();  // every thread's stores precede the release in signal()
  if (threadIdx.x == 0) {
    ch.signal();  // release: my data is visible to the peer after its wait
    ch.wait();    // acquire: the peer's data is visible to the check kernel that follows (stream order)
  }
}

// LL round: block b writes packets for peer b and unpacks the packets peer b wrote here. Packet buffers are
// double-buffered by `half`: a rank writes half h only after its peer finished reading h two rounds ago.
template <typename Packet>
__global__ void packetExchangeKernel(const MemoryChannelDeviceHandle* chans, PeerList peers, int me,
                                     int world, uint64_t slot, uint64_t packetSlot, uint64_t size,
                                     uint64_t srcShift, uint64_t outShift, uint32_t flag, int half) {
  MemoryChannelDeviceHandle ch = chans[blockIdx.x];
  const int peer = peers.rank[blockIdx.x];
  ch.putPackets<Packet>((me * 2 + half) * packetSlot, peer * slot + srcShift, size, flag, threadIdx.x,
                        blockDim.x);
  // Flags are the synchronisation: each 8/16-byte packet carries data and flag in one store.
  ch.unpackPackets<Packet>(static_cast<uint64_t>(world) * slot + peer * slot + outShift,
                           (peer * 2 + half) * packetSlot, size, flag, threadIdx.x, blockDim.x);
}

// `rounds` signal/wait rounds per block (block b <-> peer b), continuing the round count of earlier launches
// (kept per block in roundCounter[b], so graph replays continue it too). Round r: fill my send chunk for
// (peer, r&1) with fresh data, put it into the peer's receive chunk (me, r&1), signal, wait, check the
// chunk (peer, r&1) the peer wrote into `recv`. Double-buffered by r&1: the peer overwrites a chunk only
// after my signal of the next round, which follows my check of it.
__global__ void epochRoundsKernel(const MemoryChannelDeviceHandle* chans, PeerList peers, int me, int rounds,
                                  const uint8_t* recv, uint64_t* roundCounter, uint64_t testSeed,
                                  uint64_t chunk, CheckResult* result) {
  __shared__ bool ok;
  MemoryChannelDeviceHandle ch = chans[blockIdx.x];
  const int peer = peers.rank[blockIdx.x];
  const uint64_t base = roundCounter[blockIdx.x];
  for (int j = 0; j < rounds; ++j) {
    const uint64_t r = base + j;
    const uint64_t half = r & 1;
    uint8_t* send = static_cast<uint8_t*>(ch.src) + (peer * 2 + half) * chunk;
    const uint64_t seed = dataSeed(testSeed, me, peer, r);
    for (uint64_t k = threadIdx.x; k < chunk; k += blockDim.x) send[k] = patternByte(seed, k);
    __syncthreads();  // the fill precedes the copy by other threads
    ch.put((me * 2 + half) * chunk, (peer * 2 + half) * chunk, chunk, threadIdx.x, blockDim.x);
    __syncthreads();  // every thread's stores precede the release in signal()
    if (threadIdx.x == 0) {
      ch.signal();     // release: round r's data is visible to the peer after its wait
      ok = ch.wait();  // acquire: the peer's round r data is visible here
    }
    __syncthreads();
    if (!ok) return;
    ExpectLayout expect;
    expect.totalBytes = chunk;
    expect.nRegions = 1;
    expect.regions[0] = ExpectRegion{0, chunk, dataSeed(testSeed, peer, me, r), 0, 0};
    checkBytes(recv + (peer * 2 + half) * chunk, expect, threadIdx.x, blockDim.x, result);
    __syncthreads();  // the check is complete before the next round's signal lets the peer reuse a chunk
  }
  if (threadIdx.x == 0) roundCounter[blockIdx.x] = base + rounds;
}

__global__ void waitOnceKernel(MemoryDevice2DeviceSemaphoreDeviceHandle sem, int* ok) {
  *ok = sem.wait() ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------------------

class GpuHarness : public GpuTest {};
class MemoryChannelTest : public GpuTest {
 protected:
  // One memoryExchangeKernel round with fresh data for `iteration`; returns the receive buffer's check.
  CheckReport exchangeOnce(const MemoryChannelMesh& mesh, const RegisteredBuffer& send,
                           const RegisteredBuffer& recv, const SlotExchange& x, uint64_t iteration,
                           BufferChecker& checker) {
    x.prepare(stream(), send.data(), recv.data(), worldSize(), rank(), mesh.peers(), testSeed(), iteration);
    memoryExchangeKernel<<<static_cast<unsigned>(mesh.peers().size()), 512, 0, stream()>>>(
        mesh.handles(), mesh.peerList(), rank(), x.slotBytes, x.size, x.srcShift, x.dstShift);
    MESHCOMM_TEST_CHECK_LAUNCH();
    syncAndCheck();
    return checker.check(stream(), recv.data(),
                         x.expected(worldSize(), rank(), mesh.peers(), testSeed(), iteration));
  }
};
class MemoryChannelKindTest : public MemoryChannelTest,
                              public ::testing::WithParamInterface<GpuMemoryKind> {};
class RegistrationTest : public GpuTest, public ::testing::WithParamInterface<GpuMemoryKind> {};

std::string kindParamName(const ::testing::TestParamInfo<GpuMemoryKind>& info) {
  return memoryKindName(info.param);
}

// ---------------------------------------------------------------------------------------------------------
// The checker itself: it must see a single corrupted byte, in a payload and in the poison.
// ---------------------------------------------------------------------------------------------------------

TEST_F(GpuHarness, CheckerDetectsSingleCorruptBytes) {
  const uint64_t total = (1 << 20) + 3;
  auto& buf = keep<GpuBuffer>(total);
  Rng rng(testSeed() ^ rank());
  ExpectLayout layout(total, rng.byteOtherThan(0));
  const uint64_t seed = rng.next() | 1;
  layout.add(5, 1000, seed).add(4096, 70001, seed ^ 0xABCD, seed, 13);
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(buf.data(), layout.poison, total, stream()));
  fillPattern(stream(), static_cast<char*>(buf.data()) + 5, 1000, seed);
  // Region 2 holds pattern(seed ^ 0xABCD) ^ pattern(seed), both from byte 13 on: built on the host.
  std::vector<uint8_t> region2(70001);
  for (uint64_t j = 0; j < region2.size(); ++j)
    region2[j] = patternByte(seed ^ 0xABCD, j + 13) ^ patternByte(seed, j + 13);
  copyToDevice(static_cast<char*>(buf.data()) + 4096, region2.data(), region2.size());
  BufferChecker checker;
  CheckReport clean = checker.check(stream(), buf.data(), layout);
  EXPECT_TRUE(clean.ok()) << clean.describe();
  EXPECT_EQ(clean.checked, total);

  for (uint64_t index : {uint64_t{5 + 777}, uint64_t{4096 + 70000}, uint64_t{total - 1}, uint64_t{0}}) {
    const uint8_t want = layout.expected(index);
    const uint8_t bad = static_cast<uint8_t>(want ^ 0x10);
    copyToDevice(static_cast<char*>(buf.data()) + index, &bad, 1);
    CheckReport r = checker.check(stream(), buf.data(), layout);
    EXPECT_EQ(r.mismatches, 1u) << "corrupt byte " << index;
    EXPECT_EQ(r.firstIndex, index);
    EXPECT_EQ(r.firstExpected, want);
    EXPECT_EQ(r.firstGot, bad);
    copyToDevice(static_cast<char*>(buf.data()) + index, &want, 1);
  }
}

// ---------------------------------------------------------------------------------------------------------
// (a) Ping-pong between rank pairs (0,1), (2,3), ...; the odd rank out idles.
// ---------------------------------------------------------------------------------------------------------

TEST_F(MemoryChannelTest, PingPongPairsCheckEveryRound) {
  constexpr uint64_t kRegion = 64 << 10;
  constexpr int kRounds = 2000;
  const std::vector<int> peers = pairPeer(comm());
  auto& buf = keep<RegisteredBuffer>(comm(), 2 * kRegion);  // [receive region | send region]
  auto& mesh = keep<MemoryChannelMesh>(comm(), peers, buf.memory, buf.memory, tag(0));
  Rng shared(testSeed());
  const uint8_t poison = static_cast<uint8_t>(shared.next());
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(buf.data(), poison, kRegion, stream()));
  syncAndCheck();
  bootstrap().barrier();  // every receive region is poisoned before the first ping
  if (peers.empty()) {
    std::printf("[rank %d] no partner for the ping-pong (odd rank out): idle\n", rank());
    return;
  }
  const int peer = peers[0];
  const bool initiator = rank() < peer;
  const int pinger = initiator ? rank() : peer, ponger = initiator ? peer : rank();
  MemoryChannelDeviceHandle handle = mesh.channels()[0].deviceHandle();
  BufferChecker checker;
  CheckTally tally;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t size = shared.size(kRegion);
    const uint64_t seedPing = dataSeed(testSeed(), pinger, ponger, round);
    const uint64_t seedPong = dataSeed(testSeed(), ponger, pinger, round);
    ExpectLayout expect(kRegion, poison);
    if (initiator)
      expect.add(0, size, seedPing, seedPong);  // pong = ping ^ pattern(seedPong)
    else
      expect.add(0, size, seedPing);
    pingPongRoundKernel<<<1, 512, 0, stream()>>>(handle, initiator, size, kRegion, seedPing, seedPong, expect,
                                                 poison, checker.result());
    MESHCOMM_TEST_CHECK_LAUNCH();
    syncAndCheck();
    CheckReport r = checker.collect(stream());
    if (r.ok() && r.checked != kRegion) r.mismatches = ~0ull;  // the kernel must have compared the region
    tally.record(r, detail::concat("round ", round, " (", size, " bytes) with peer ", peer));
  }
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();
}

// ---------------------------------------------------------------------------------------------------------
// (b) Bidirectional all-pairs puts, 10^4 rounds of random sizes and offsets, checked every round.
// ---------------------------------------------------------------------------------------------------------

TEST_P(MemoryChannelKindTest, AllPairsPutSoak) {
  constexpr uint64_t kMaxSize = 128 << 10, kMaxShift = 15, kSlot = kMaxSize + 16;
  constexpr int kIterations = 10000;
  const std::vector<int> peers = allPeers(comm());
  const uint64_t total = worldSize() * kSlot;
  auto& send = keep<RegisteredBuffer>(comm(), total, GetParam());
  auto& recv = keep<RegisteredBuffer>(comm(), total, GetParam());
  auto& mesh = keep<MemoryChannelMesh>(comm(), peers, recv.memory, send.memory, tag(0));
  for (const auto& remote : mesh.remoteMemories()) {
    ASSERT_TRUE(remote.isMapped()) << "peer " << remote.rank() << "'s memory is not mapped";
    ASSERT_EQ(remote.size(), total);
  }
  Rng shared(testSeed());
  BufferChecker checker;
  CheckTally tally;
  for (int it = 0; it < kIterations; ++it) {
    const SlotExchange x = SlotExchange::random(shared, kSlot, kMaxSize, kMaxShift);
    tally.record(exchangeOnce(mesh, send, recv, x, it, checker),
                 detail::concat("iteration ", it, " (", x.describe(), ")"));
  }
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();
}

INSTANTIATE_TEST_SUITE_P(Kinds, MemoryChannelKindTest,
                         ::testing::Values(GpuMemoryKind::CudaMalloc, GpuMemoryKind::CuMem), kindParamName);

// ---------------------------------------------------------------------------------------------------------
// (c) LL packets: all pairs, sizes 1 B .. 64 KB incl. odd sizes and unaligned offsets, flags never reset.
// ---------------------------------------------------------------------------------------------------------

class PacketTest : public MemoryChannelTest {
 protected:
  template <typename Packet>
  void run() {
    constexpr uint64_t kMaxSize = 64 << 10, kMaxShift = 7, kSlot = kMaxSize + 8;
    const std::vector<uint64_t> sizes = {1,    3,    8,    16,   32,   64,    128,   256,  512,
                                         1023, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    constexpr int kRoundsPerSize = 64;  // 17 sizes x 64 = 1088 rounds, sizes interleaved
    const uint64_t packetSlot = device::packetBufferBytes<Packet>(kSlot);
    const std::vector<int> peers = allPeers(comm());
    const int world = worldSize();
    // local: [send slots | unpacked output slots]; packets: [source rank][half] packet slots.
    auto& local = keep<RegisteredBuffer>(comm(), 2 * world * kSlot);
    auto& packets = keep<RegisteredBuffer>(comm(), 2 * world * packetSlot);
    auto& mesh =
        keep<MemoryChannelMesh>(comm(), peers, packets.memory, local.memory, tag(0), 1, packets.memory);
    Rng shared(testSeed());
    BufferChecker checker;
    CheckTally tally;
    const int rounds = static_cast<int>(sizes.size()) * kRoundsPerSize;
    char* out = local.data() + world * kSlot;
    for (int it = 0; it < rounds; ++it) {
      SlotExchange x;
      x.slotBytes = kSlot;
      x.size = sizes[it % sizes.size()];
      x.srcShift = shared.uniform(0, kMaxShift);
      x.dstShift = shared.uniform(0, kMaxShift);  // offset of the unpacked output in its slot
      x.poison = static_cast<uint8_t>(shared.next());
      x.prepare(stream(), local.data(), out, world, rank(), peers, testSeed(), it);
      const uint32_t flag = static_cast<uint32_t>(it) + 1;  // starts at 1, advances every round, never resets
      packetExchangeKernel<Packet><<<static_cast<unsigned>(peers.size()), 256, 0, stream()>>>(
          mesh.handles(), mesh.peerList(), rank(), world, kSlot, packetSlot, x.size, x.srcShift, x.dstShift,
          flag, it & 1);
      MESHCOMM_TEST_CHECK_LAUNCH();
      syncAndCheck();
      tally.record(checker.check(stream(), out, x.expected(world, rank(), peers, testSeed(), it)),
                   detail::concat("round ", it, " flag ", flag, " (", x.describe(), ")"));
    }
    EXPECT_EQ(tally.failures(), 0u) << tally.summary();
  }
};

TEST_F(PacketTest, LL16AllPairsSizesAndFlags) {
  run<LL16Packet>();
}
TEST_F(PacketTest, LL8AllPairsSizesAndFlags) {
  run<LL8Packet>();
}

// ---------------------------------------------------------------------------------------------------------
// (d) Semaphore epochs: many launches with varying round counts, then a captured CUDA graph replayed, all
// continuing one signal/wait sequence; data checked after every launch/replay and token counts at the end.
// ---------------------------------------------------------------------------------------------------------

TEST_F(MemoryChannelTest, SemaphoreEpochsAcrossLaunchesAndGraphReplays) {
  constexpr uint64_t kChunk = 4096;
  constexpr int kLaunches = 200, kReplays = 150, kGraphRoundsA = 3, kGraphRoundsB = 2;
  const std::vector<int> peers = allPeers(comm());
  const int world = worldSize();
  const unsigned nPeers = static_cast<unsigned>(peers.size());
  // send: [destination peer][half] chunks; recv (exported): [source rank][half] chunks.
  auto& send = keep<RegisteredBuffer>(comm(), world * 2 * kChunk);
  auto& recv = keep<RegisteredBuffer>(comm(), world * 2 * kChunk);
  auto& mesh = keep<MemoryChannelMesh>(comm(), peers, recv.memory, send.memory, tag(0));
  auto& counters = keep<GpuBuffer>(nPeers * sizeof(uint64_t));
  Rng shared(testSeed());
  BufferChecker checker;
  CheckTally tally;
  uint64_t totalRounds = 0;
  auto expectChecked = [&](int rounds, const std::string& what) {
    CheckReport r = checker.collect(stream());
    const uint64_t want = static_cast<uint64_t>(rounds) * kChunk * nPeers;
    if (r.ok() && r.checked != want) {
      ADD_FAILURE() << what << ": checked " << r.checked << " bytes, expected " << want;
    }
    tally.record(r, what);
  };

  for (int launch = 0; launch < kLaunches; ++launch) {
    const int rounds = static_cast<int>(shared.uniform(1, 6));
    epochRoundsKernel<<<nPeers, 256, 0, stream()>>>(
        mesh.handles(), mesh.peerList(), rank(), rounds, reinterpret_cast<const uint8_t*>(recv.data()),
        static_cast<uint64_t*>(counters.data()), testSeed(), kChunk, checker.result());
    MESHCOMM_TEST_CHECK_LAUNCH();
    syncAndCheck();
    expectChecked(rounds, detail::concat("launch ", launch, " (", rounds, " rounds)"));
    totalRounds += rounds;
  }

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MESHCOMM_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  for (int rounds : {kGraphRoundsA, kGraphRoundsB}) {
    epochRoundsKernel<<<nPeers, 256, 0, stream()>>>(
        mesh.handles(), mesh.peerList(), rank(), rounds, reinterpret_cast<const uint8_t*>(recv.data()),
        static_cast<uint64_t*>(counters.data()), testSeed(), kChunk, checker.result());
    MESHCOMM_TEST_CHECK_LAUNCH();
  }
  MESHCOMM_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  MESHCOMM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < kReplays; ++replay) {
    MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, stream()));
    syncAndCheck();
    expectChecked(kGraphRoundsA + kGraphRoundsB, detail::concat("graph replay ", replay));
    totalRounds += kGraphRoundsA + kGraphRoundsB;
  }
  MESHCOMM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MESHCOMM_CUDA_CHECK(cudaGraphDestroy(graph));
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();

  // Epochs: every token received exactly totalRounds signals and every waiter consumed exactly that many.
  std::vector<uint64_t> rounds(nPeers);
  MESHCOMM_CUDA_CHECK(
      cudaMemcpy(rounds.data(), counters.data(), nPeers * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  for (unsigned i = 0; i < nPeers; ++i) {
    const auto h = mesh.channels()[i].deviceHandle().semaphore.local;
    uint64_t inbound = 0, expected = 0;
    MESHCOMM_CUDA_CHECK(cudaMemcpy(&inbound, h.inbound, sizeof(uint64_t), cudaMemcpyDeviceToHost));
    MESHCOMM_CUDA_CHECK(cudaMemcpy(&expected, h.expectedInbound, sizeof(uint64_t), cudaMemcpyDeviceToHost));
    EXPECT_EQ(inbound, totalRounds) << "token from peer " << peers[i];
    EXPECT_EQ(expected, totalRounds) << "waits on peer " << peers[i];
    EXPECT_EQ(rounds[i], totalRounds) << "device round counter for peer " << peers[i];
  }
}

// ---------------------------------------------------------------------------------------------------------
// (e) Registering, exchanging and releasing memory 10^4 times keeps device memory and fds flat.
// ---------------------------------------------------------------------------------------------------------

TEST_P(RegistrationTest, RegisterExchangeReleaseStaysFlat) {
  constexpr int kWarmup = 200, kCycles = 10000;
  constexpr uint64_t kPersistent = 8 << 20, kMaxOffset = 1 << 20, kMaxLen = 3 << 20;
  constexpr uint64_t kHead = 4096, kTail = 256;
  constexpr double kMiB = 1024.0 * 1024.0;
  const GpuMemoryKind kind = GetParam();
  const int next = (rank() + 1) % worldSize(), prev = (rank() + worldSize() - 1) % worldSize();
  auto& persistent = keep<GpuBuffer>(kPersistent, kind);
  const uint64_t persistentSeed = dataSeed(testSeed(), rank(), rank(), ~0ull);
  fillPattern(stream(), persistent.data(), kPersistent, persistentSeed);
  syncAndCheck();

  // What exporter `r` registers in cycle i: a sub-range [offset, offset+len) of its persistent buffer, or
  // (every 4th cycle) of a fresh allocation made for this cycle only: a peer mapping that outlived its cycle
  // would keep that freed allocation alive and show as a drop of free memory. Both ranks compute it.
  struct Cycle {
    uint64_t offset, len, seed;
    bool fresh;
  };
  auto cycleOf = [&](int r, int i) {
    Rng rng(mix64(testSeed() ^ (static_cast<uint64_t>(r) << 40) ^ static_cast<uint64_t>(i)));
    Cycle c;
    c.fresh = i % 4 == 3;
    c.offset = rng.next() % 4 == 0 ? rng.uniform(0, kMaxOffset) : rng.uniform(0, kMaxOffset / 256) * 256;
    c.len = rng.size(kMaxLen);
    c.seed = c.fresh ? dataSeed(testSeed(), r, r, i) : dataSeed(testSeed(), r, r, ~0ull);
    return c;
  };

  BufferChecker checker;
  CheckTally tally;
  size_t freeBefore = 0, rssBefore = 0;
  int fdsBefore = 0;
  for (int i = 0; i < kWarmup + kCycles; ++i) {
    if (i == kWarmup) {
      syncAndCheck();
      freeBefore = freeDeviceMemory();
      fdsBefore = openFileDescriptors();
      rssBefore = residentHostMemory();
    }
    const Cycle mine = cycleOf(rank(), i), theirs = cycleOf(prev, i);
    GpuBuffer fresh;  // declared first: freed last, after the registration and the peer's mapping are gone
    char* base = static_cast<char*>(persistent.data());
    if (mine.fresh) {
      fresh = GpuBuffer(mine.offset + mine.len, kind);
      fillPattern(stream(), fresh.data(), mine.offset + mine.len, mine.seed);
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
      base = static_cast<char*>(fresh.data());
    }
    RegisteredMemory mem = comm().registerMemory(base + mine.offset, mine.len);
    comm().sendMemory(mem, next, tag(0));
    {
      RegisteredMemory remote = comm().recvMemory(prev, tag(0));
      ASSERT_TRUE(remote.isMapped()) << "cycle " << i << ": memory of rank " << prev << " is not mapped";
      ASSERT_EQ(remote.size(), theirs.len) << "cycle " << i;
      ASSERT_EQ(remote.rank(), prev) << "cycle " << i;
      // The mapping shows the exporter's bytes at the registered offset: head and tail.
      const uint64_t head = std::min(theirs.len, kHead), tail = std::min(theirs.len, kTail);
      ExpectLayout headLayout(head, 0);
      headLayout.add(0, head, theirs.seed, 0, theirs.offset);
      tally.record(checker.check(stream(), remote.data(), headLayout), detail::concat("cycle ", i, " head"));
      ExpectLayout tailLayout(tail, 0);
      tailLayout.add(0, tail, theirs.seed, 0, theirs.offset + theirs.len - tail);
      tally.record(checker.check(stream(), static_cast<char*>(remote.data()) + theirs.len - tail, tailLayout),
                   detail::concat("cycle ", i, " tail"));
    }  // the mapping of prev's memory is released here
    // Tell prev its memory is no longer mapped here; hear the same from next before dropping `mem` (and
    // freeing `fresh`), so no exporter releases memory an importer still uses.
    const int32_t released = i;
    int32_t heard = -1;
    bootstrap().send(&released, sizeof(released), prev, tag(1));
    bootstrap().recv(&heard, sizeof(heard), next, tag(1));
    ASSERT_EQ(heard, i);
  }
  syncAndCheck();
  const size_t freeAfter = freeDeviceMemory();
  const int fdsAfter = openFileDescriptors();
  const size_t rssAfter = residentHostMemory();
  const double driftMiB = (static_cast<double>(freeBefore) - static_cast<double>(freeAfter)) / kMiB;
  const double rssDriftMiB = (static_cast<double>(rssAfter) - static_cast<double>(rssBefore)) / kMiB;
  std::printf(
      "[rank %d] %s: free device memory %.1f MiB after %d warm-up cycles, %.1f MiB after %d more "
      "(drift %.2f MiB); open fds %d -> %d; resident host memory %.1f -> %.1f MiB (drift %.2f MiB)\n",
      rank(), memoryKindName(kind), freeBefore / kMiB, kWarmup, freeAfter / kMiB, kCycles, driftMiB,
      fdsBefore, fdsAfter, rssBefore / kMiB, rssAfter / kMiB, rssDriftMiB);
  EXPECT_LE(driftMiB, 2.0) << "device memory leaked over " << kCycles << " register/exchange/release cycles";
  // A leak of 256 bytes per cycle (less than one registration descriptor) shows as 2.4 MiB here.
  EXPECT_GT(rssBefore, 0u) << "VmRSS not readable from /proc/self/status";
  EXPECT_LE(rssDriftMiB, 2.0) << "host memory leaked over " << kCycles << " register/exchange/release cycles";
  EXPECT_LE(fdsAfter - fdsBefore, 8) << "file descriptors leaked over " << kCycles << " cycles";
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();
}

INSTANTIATE_TEST_SUITE_P(Kinds, RegistrationTest,
                         ::testing::Values(GpuMemoryKind::CudaMalloc, GpuMemoryKind::CuMem), kindParamName);

// ---------------------------------------------------------------------------------------------------------
// (f) A device wait that nobody signals times out, is reported by checkDeviceError (rank, peer, operation)
// and cleared; the other ranks and every other semaphore stay in step.
// ---------------------------------------------------------------------------------------------------------

bool containsNoCase(std::string haystack, std::string needle) {
  for (auto* s : {&haystack, &needle})
    for (auto& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return haystack.find(needle) != std::string::npos;
}

TEST_F(MemoryChannelTest, DeviceTimeoutIsReportedAndCleared) {
  constexpr uint64_t kTimeoutNs = 300ull * 1000 * 1000;
  std::vector<int> dedicatedPeer;
  if (rank() == 0) dedicatedPeer = {1};
  if (rank() == 1) dedicatedPeer = {0};
  // A semaphore used by this test only: the timed-out wait advances rank 0's expected count for it alone.
  auto& conns = keep<std::vector<std::shared_ptr<Connection>>>(connectPeers(comm(), dedicatedPeer, tag(0)));
  MemoryDevice2DeviceSemaphore* sem = nullptr;
  if (!conns.empty()) sem = &keep<MemoryDevice2DeviceSemaphore>(comm(), conns[0], tag(1));
  bootstrap().barrier();

  if (rank() == 0) {
    const SpinContext ctx = comm().spinContext(1);
    EXPECT_EQ(ctx.timeoutNs, static_cast<uint64_t>(envInt("MESHCOMM_DEVICE_TIMEOUT_MS")) * 1000000ull)
        << "spinContext does not follow MESHCOMM_DEVICE_TIMEOUT_MS";
    EXPECT_EQ(ctx.rank, 0);
    EXPECT_EQ(ctx.peer, 1);
    MemoryDevice2DeviceSemaphoreDeviceHandle h = sem->deviceHandle();
    ASSERT_NE(h.spin.report, nullptr) << "semaphore handle carries no error report";
    h.spin.timeoutNs = kTimeoutNs;
    auto& ok = keep<GpuBuffer>(sizeof(int));
    const auto start = std::chrono::steady_clock::now();
    waitOnceKernel<<<1, 1, 0, stream()>>>(h, static_cast<int*>(ok.data()));
    MESHCOMM_TEST_CHECK_LAUNCH();
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int okHost = -1;
    MESHCOMM_CUDA_CHECK(cudaMemcpy(&okHost, ok.data(), sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT_EQ(okHost, 0) << "a wait nobody signals returned success";
    EXPECT_GE(seconds, 0.25) << "the wait gave up before its timeout";
    EXPECT_LT(seconds, 15.0) << "the wait took far longer than its 300 ms timeout";
    try {
      comm().checkDeviceError();
      ADD_FAILURE() << "checkDeviceError did not throw after a device timeout";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::Timeout) << what;
      EXPECT_TRUE(containsNoCase(what, "rank 0")) << "error does not name the rank: " << what;
      EXPECT_TRUE(containsNoCase(what, "peer 1")) << "error does not name the peer: " << what;
      EXPECT_TRUE(containsNoCase(what, "wait")) << "error does not name the operation: " << what;
      std::printf("[rank 0] expected device timeout reported as: %s\n", what.c_str());
    }
    comm().clearDeviceError();
    EXPECT_NO_THROW(comm().checkDeviceError()) << "clearDeviceError left the error set";
  } else {
    EXPECT_NO_THROW(comm().checkDeviceError()) << "rank 0's timeout was reported on rank " << rank();
  }
  bootstrap().barrier();

  // Everyone goes on: fresh all-pairs channels exchange data as usual (abort flag cleared on rank 0).
  constexpr uint64_t kSlot = 4096 + 16;
  const std::vector<int> peers = allPeers(comm());
  auto& send = keep<RegisteredBuffer>(comm(), worldSize() * kSlot);
  auto& recv = keep<RegisteredBuffer>(comm(), worldSize() * kSlot);
  auto& mesh = keep<MemoryChannelMesh>(comm(), peers, recv.memory, send.memory, tag(2));
  Rng shared(testSeed());
  BufferChecker checker;
  for (int it = 0; it < 10; ++it) {
    const SlotExchange x = SlotExchange::random(shared, kSlot, 4096, 15);
    CheckReport r = exchangeOnce(mesh, send, recv, x, it, checker);
    EXPECT_TRUE(r.ok()) << "exchange " << it << " after the timeout: " << r.describe();
  }
}

}  // namespace
}  // namespace meshcomm::test
