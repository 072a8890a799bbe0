// PortChannel (GPU -> FIFO -> host proxy -> copy engine or TCP) across GPUs, all pairs, checked data.
//
// Over TCP: the TCP variant forces the inter-node path on one host with MESHCOMM_TRANSPORT=tcp. The
// Communicator reads that variable when it is constructed, so the test builds a second Communicator on the
// process's bootstrap while the variable is set (every rank at the same point, after SetUp's barrier), and
// keeps the variable set during the pairwise setup too (in case a later version reads it at connect or
// recvMemory time); it restores the variable afterwards. Registrations, connections, proxy and device
// error checks of that variant all belong to the second communicator.
#include "gpu_test_env.hpp"
#include "meshcomm/device.hpp"

namespace meshcomm::test {
namespace {

// One all-pairs round (see SlotExchange): thread i drives the channel to peer i. A ready handshake first
// (my receive buffer is poisoned), then the data in nChunks puts, the last one with the signal; then the
// wait for the peer's data and a flush (my send buffer may be refilled after the kernel).
__global__ void portExchangeKernel(const PortChannelDeviceHandle* chans, PeerList peers, int me,
                                   uint64_t slot, uint64_t size, uint64_t srcShift, uint64_t dstShift,
                                   uint64_t nChunks) {
  const int i = threadIdx.x;
  if (i >= peers.n) return;
  PortChannelDeviceHandle ch = chans[i];
  const int peer = peers.rank[i];
  ch.signal();             // my receive buffer was poisoned before this kernel (stream order)
  if (!ch.wait()) return;  // acquire: the peer's receive buffer is poisoned; my data may land there now
  const uint64_t src = peer * slot + srcShift, dst = me * slot + dstShift;
  const uint64_t chunk = (size + nChunks - 1) / nChunks;
  for (uint64_t off = 0; off < size; off += chunk) {
    const uint64_t n = size - off < chunk ? size - off : chunk;
    if (off + n < size)
      ch.put(dst + off, src + off, n);
    else
      ch.putWithSignal(dst + off, src + off, n);  // the signal lands after every earlier put of the channel
  }
  if (!ch.wait())
    return;    // acquire: the peer's data has landed here (the check kernel follows in stream order)
  ch.flush();  // my puts have completed: the send buffer may be rewritten
}

// Piece j of the FIFO-wrap test: 1..127 bytes (a function both the kernel and the host evaluate).
MESHCOMM_HOST_DEVICE_INLINE uint64_t pieceBytes(uint64_t seed, uint64_t j) {
  return 1 + mix64(seed + j) % 127;
}

// Thread i pushes nPieces puts of consecutive pieces to peer i, with no flush in between, then one signal
// and one final flush: far more triggers than the FIFO holds, so the ring wraps many times.
__global__ void manySmallPutsKernel(const PortChannelDeviceHandle* chans, PeerList peers, int me,
                                    uint64_t slot, uint64_t pieceSeed, uint64_t nPieces) {
  const int i = threadIdx.x;
  if (i >= peers.n) return;
  PortChannelDeviceHandle ch = chans[i];
  const int peer = peers.rank[i];
  ch.signal();             // my receive buffer was poisoned before this kernel (stream order)
  if (!ch.wait()) return;  // acquire: the peer's receive buffer is ready
  uint64_t off = 0;
  for (uint64_t j = 0; j < nPieces; ++j) {
    const uint64_t n = pieceBytes(pieceSeed, j);
    ch.put(me * slot + off, peer * slot + off, n);
    off += n;
  }
  ch.signal();             // lands after all the puts above
  if (!ch.wait()) return;  // acquire: all of the peer's pieces have landed here
  ch.flush();
}

// Thread i: a signal to peer i, then the wait for its signal. Before puts: the peers' receive buffers are
// poisoned (stream order on each rank); after flushed puts: every rank's puts to this one have landed.
__global__ void handshakeKernel(const PortChannelDeviceHandle* chans, PeerList peers) {
  const int i = threadIdx.x;
  if (i >= peers.n) return;
  PortChannelDeviceHandle ch = chans[i];
  ch.signal();
  ch.wait();
}

// Block b moves its share of the `size` bytes for every peer (thread i: peer i) in `piecesPerBlock` puts,
// then flushes: every block of the grid waits on the one FIFO's flush word (and, with more triggers than the
// FIFO holds, for space) at the same time.
__global__ void manyBlocksPutFlushKernel(const PortChannelDeviceHandle* chans, PeerList peers, int me,
                                         uint64_t slot, uint64_t size, uint64_t piecesPerBlock) {
  const int i = threadIdx.x;
  if (i >= peers.n) return;
  PortChannelDeviceHandle ch = chans[i];
  const int peer = peers.rank[i];
  const uint64_t share = (size + gridDim.x - 1) / gridDim.x;
  const uint64_t begin = min(size, blockIdx.x * share), end = min(size, begin + share);
  const uint64_t piece = (end - begin + piecesPerBlock - 1) / piecesPerBlock;
  for (uint64_t off = begin; off < end; off += piece)
    ch.put(me * slot + off, peer * slot + off, min(piece, end - off));
  ch.flush();
}

class PortChannelTest : public GpuTest, public ::testing::WithParamInterface<Transport> {
 protected:
  bool tcp() const { return GetParam() == Transport::Tcp; }
  // The communicator of this variant: the process's for CUDA IPC, a dedicated one for TCP (see above).
  Communicator& transportComm() {
    if (!tcp()) return comm();
    if (tcpComm_ == nullptr) {
      ScopedEnv transport("MESHCOMM_TRANSPORT", "tcp");
      tcpComm_ = &keep<Communicator>(process().bootstrap, comm().cudaDevice());
    }
    return *tcpComm_;
  }
  // Channels to every peer over the variant's transport; the connections must use it.
  PortChannelMesh& buildMesh(const RegisteredBuffer& send, const RegisteredBuffer& recv, int tagIndex) {
    ScopedEnv transport("MESHCOMM_TRANSPORT", tcp() ? "tcp" : nullptr);
    Communicator& c = transportComm();
    auto& mesh = keep<PortChannelMesh>(c, allPeers(c), recv.memory, send.memory, tag(tagIndex));
    for (const auto& conn : mesh.connections()) {
      EXPECT_EQ(conn->transport(), GetParam())
          << "connection to rank " << conn->remoteRank() << " uses " << transportName(conn->transport());
    }
    return mesh;
  }
  // Stream sync plus device error checks of both communicators.
  void syncAndCheckAll() {
    syncAndCheck();
    if (tcpComm_ != nullptr) tcpComm_->checkDeviceError();
  }

 private:
  Communicator* tcpComm_ = nullptr;
};

std::string transportParamName(const ::testing::TestParamInfo<Transport>& info) {
  return info.param == Transport::Tcp ? "Tcp" : "CudaIpc";
}

// put / putWithSignal / wait / flush with random data, all pairs; sizes from 1 byte to 64 MB (4 MB over TCP).
TEST_P(PortChannelTest, AllPairsPutSignalFlush) {
  const uint64_t maxSize = tcp() ? (4ull << 20) : (64ull << 20);
  const uint64_t maxShift = 15, slot = maxSize + 16;
  const int randomRounds = tcp() ? 30 : 200;
  const std::vector<int> peers = allPeers(comm());
  auto& send = keep<RegisteredBuffer>(transportComm(), worldSize() * slot);
  auto& recv = keep<RegisteredBuffer>(transportComm(), worldSize() * slot);
  PortChannelMesh& mesh = buildMesh(send, recv, 0);

  // Fixed edge sizes first (each twice, aligned and shifted), then random sizes up to 256 KB.
  std::vector<uint64_t> fixed = {1,       3,        1023,    4096, 65537, 1 << 20, (1 << 20) + 7,
                                 4 << 20, 16 << 20, 64 << 20};
  Rng shared(testSeed());
  std::vector<SlotExchange> rounds;
  for (uint64_t size : fixed) {
    if (size > maxSize) continue;
    for (int k = 0; k < 2; ++k) {
      SlotExchange x = SlotExchange::random(shared, slot, maxSize, maxShift);
      x.size = size;
      if (k == 0) x.srcShift = x.dstShift = 0;
      rounds.push_back(x);
    }
  }
  for (int k = 0; k < randomRounds; ++k)
    rounds.push_back(SlotExchange::random(shared, slot, 256 << 10, maxShift));

  BufferChecker checker;
  CheckTally tally;
  for (size_t it = 0; it < rounds.size(); ++it) {
    const SlotExchange& x = rounds[it];
    const uint64_t nChunks = std::min<uint64_t>(x.size, shared.uniform(1, 4));
    x.prepare(stream(), send.data(), recv.data(), worldSize(), rank(), peers, testSeed(), it);
    portExchangeKernel<<<1, 32, 0, stream()>>>(mesh.handles(), mesh.peerList(), rank(), slot, x.size,
                                               x.srcShift, x.dstShift, nChunks);
    MESHCOMM_TEST_CHECK_LAUNCH();
    syncAndCheckAll();
    mesh.proxy().checkError();
    tally.record(checker.check(stream(), recv.data(), x.expected(worldSize(), rank(), peers, testSeed(), it)),
                 detail::concat(transportName(GetParam()), " round ", it, " (", x.describe(), ", ", nChunks,
                                " chunks)"));
  }
  EXPECT_EQ(tally.failures(), 0u) << tally.summary();
}

INSTANTIATE_TEST_SUITE_P(Transports, PortChannelTest, ::testing::Values(Transport::CudaIpc, Transport::Tcp),
                         transportParamName);

// FIFO wrap: 5000 small puts per peer without a flush in between, then one signal and the final flush.
class PortChannelFifoTest : public GpuTest {};

TEST_F(PortChannelFifoTest, ManySmallPutsWrapTheFifo) {
  constexpr uint64_t kPieces = 5000;
  ASSERT_GT(static_cast<int64_t>(kPieces), 4 * envInt("MESHCOMM_FIFO_SIZE"))
      << "the test must push several FIFO laps of triggers";
  const std::vector<int> peers = allPeers(comm());
  const uint64_t pieceSeed = testSeed() ^ 0xF1F0;
  uint64_t total = 0;
  for (uint64_t j = 0; j < kPieces; ++j) total += pieceBytes(pieceSeed, j);
  const uint64_t slot = total + 16;
  auto& send = keep<RegisteredBuffer>(comm(), worldSize() * slot);
  auto& recv = keep<RegisteredBuffer>(comm(), worldSize() * slot);
  auto& mesh = keep<PortChannelMesh>(comm(), peers, recv.memory, send.memory, tag(0));

  SlotExchange x;  // one round: `total` bytes per peer, unshifted, moved as kPieces puts
  x.slotBytes = slot;
  x.size = total;
  x.poison = static_cast<uint8_t>(Rng(testSeed()).next());
  x.prepare(stream(), send.data(), recv.data(), worldSize(), rank(), peers, testSeed(), 0);
  manySmallPutsKernel<<<1, 32, 0, stream()>>>(mesh.handles(), mesh.peerList(), rank(), slot, pieceSeed,
                                              kPieces);
  MESHCOMM_TEST_CHECK_LAUNCH();
  syncAndCheck();
  mesh.proxy().checkError();
  BufferChecker checker;
  CheckReport r = checker.check(stream(), recv.data(), x.expected(worldSize(), rank(), peers, testSeed(), 0));
  EXPECT_TRUE(r.ok()) << kPieces << " pieces (" << total << " bytes) per peer: " << r.describe();
}

// 64 blocks put their shares to every peer (8 puts each) and flush at once: more triggers than the FIFO holds
// (pushers wait for space) and 64 waiters on the flush word, all served through the GPU-memory mirrors of the
// proxy's counters; the data is checked.
TEST_F(PortChannelFifoTest, ManyBlocksPutAndFlushAtOnce) {
  constexpr int kBlocks = 64;
  constexpr uint64_t kPiecesPerBlock = 8;
  const std::vector<int> peers = allPeers(comm());
  ASSERT_GT(static_cast<int64_t>(kBlocks * (kPiecesPerBlock + 1)), envInt("MESHCOMM_FIFO_SIZE"))
      << "the blocks must push more triggers than the FIFO holds";
  const uint64_t size = (4ull << 20) + 12345, slot = size + 16;
  auto& send = keep<RegisteredBuffer>(comm(), worldSize() * slot);
  auto& recv = keep<RegisteredBuffer>(comm(), worldSize() * slot);
  auto& mesh = keep<PortChannelMesh>(comm(), peers, recv.memory, send.memory, tag(0));

  SlotExchange x;  // one round: `size` bytes per peer, unshifted
  x.slotBytes = slot;
  x.size = size;
  x.poison = static_cast<uint8_t>(Rng(testSeed() ^ 0xB10C).next());
  x.prepare(stream(), send.data(), recv.data(), worldSize(), rank(), peers, testSeed(), 0);
  // The put kernel is launched while the handshake waits on the proxy: under lazy loading its first launch
  // would synchronize the context and hold the proxy's signal back until the device timeout.
  EXPECT_GE(loadKernelModuleOf(reinterpret_cast<const void*>(&manyBlocksPutFlushKernel)), 2u);
  handshakeKernel<<<1, 32, 0, stream()>>>(mesh.handles(), mesh.peerList());
  MESHCOMM_TEST_CHECK_LAUNCH();
  manyBlocksPutFlushKernel<<<kBlocks, 32, 0, stream()>>>(mesh.handles(), mesh.peerList(), rank(), slot, size,
                                                         kPiecesPerBlock);
  MESHCOMM_TEST_CHECK_LAUNCH();
  handshakeKernel<<<1, 32, 0, stream()>>>(mesh.handles(), mesh.peerList());
  MESHCOMM_TEST_CHECK_LAUNCH();
  syncAndCheck();
  mesh.proxy().checkError();
  BufferChecker checker;
  CheckReport r = checker.check(stream(), recv.data(), x.expected(worldSize(), rank(), peers, testSeed(), 0));
  EXPECT_TRUE(r.ok()) << kBlocks << " blocks x " << kPiecesPerBlock << " puts per peer: " << r.describe();
}

}  // namespace
}  // namespace meshcomm::test
