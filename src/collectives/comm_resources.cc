// CommResources: scratch and packet buffers mapped on every peer, a grid of MemoryChannels, device arrays.
//
// Construction order (collective; safe against deadlock because bootstrap sends are buffered by the
// receiver and every pairwise step sends before it receives):
//   1. topology, configuration agreement (bootstrap allGather)
//   2. scratch/packet buffers: register, send to every peer, then receive from every peer
//   3. connections: comm.connect(peer) for peers in ascending order (the global (i<j) pair order)
//   4. semaphores, in bulk: per peer, all channelsPerPeer inbound tokens are sent in one message batch,
//      then every peer's batch is received (one exchange per peer instead of one per semaphore)
//   5. device arrays of channel handles and peer buffer pointers
#include "meshcomm/comm_resources.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "collectives/memory_exchange.hpp"
#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

namespace {

// Bootstrap tags of the pair exchanges here (distinct, below 2^26).
constexpr int kTagBase = 0x3c00000;
constexpr int kScratchTag = kTagBase + 1;
constexpr int kPacketTag = kTagBase + 2;
constexpr int kConnectionTag = kTagBase + 3;
constexpr int kTokenTag = kTagBase + 4;

struct ResolvedConfig {
  uint64_t scratchBytes;
  uint64_t packetBytes;
  uint64_t channelsPerPeer;
  bool operator==(const ResolvedConfig& o) const {
    return scratchBytes == o.scratchBytes && packetBytes == o.packetBytes &&
           channelsPerPeer == o.channelsPerPeer;
  }
};

uint64_t positiveSetting(int rank, size_t configured, const char* var) {
  if (configured != 0) return configured;
  const int64_t v = envInt(var);
  MESHCOMM_REQUIRE(v > 0, "rank ", rank, ": CommResources: ", var, "=", v, " must be positive");
  return static_cast<uint64_t>(v);
}

ResolvedConfig resolveConfig(int rank, const CommResourcesConfig& c) {
  MESHCOMM_REQUIRE(c.channelsPerPeer >= 0, "rank ", rank, ": CommResources: channelsPerPeer ",
                   c.channelsPerPeer, " is negative");
  ResolvedConfig r{
      positiveSetting(rank, c.scratchBytes, "MESHCOMM_SCRATCH_BYTES"),
      positiveSetting(rank, c.packetBytes, "MESHCOMM_PACKET_BYTES"),
      positiveSetting(rank, static_cast<size_t>(c.channelsPerPeer), "MESHCOMM_CHANNELS_PER_PEER")};
  MESHCOMM_REQUIRE(r.channelsPerPeer <= 1024, "rank ", rank, ": CommResources: ", r.channelsPerPeer,
                   " channels per peer is more than 1024");
  return r;
}

// Every rank must use the same sizes: offsets of reserved regions and channel indices must agree.
void checkConfigAgrees(Bootstrap& bootstrap, const ResolvedConfig& mine) {
  std::vector<ResolvedConfig> all(bootstrap.size());
  all[bootstrap.rank()] = mine;
  bootstrap.allGather(all.data(), sizeof(ResolvedConfig));
  for (int r = 0; r < bootstrap.size(); ++r) {
    if (!(all[r] == mine)) {
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", bootstrap.rank(), ": CommResources: rank ", r,
                     " uses scratch/packet/channels ", all[r].scratchBytes, "/", all[r].packetBytes, "/",
                     all[r].channelsPerPeer, " but this rank ", mine.scratchBytes, "/", mine.packetBytes, "/",
                     mine.channelsPerPeer,
                     " (MESHCOMM_SCRATCH_BYTES, MESHCOMM_PACKET_BYTES and "
                     "MESHCOMM_CHANNELS_PER_PEER must be equal on all ranks)");
    }
  }
}

CommTopology buildTopology(Communicator& comm) {
  CommTopology t;
  t.rank = comm.rank();
  t.nRanks = comm.size();
  t.nRanksPerNode = comm.bootstrap().nRanksPerNode();
  t.allPeersIpc = true;
  for (int p = 0; p < t.nRanks; ++p) {
    if (p != t.rank && comm.transportTo(p) != Transport::CudaIpc) {
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", t.rank, ": CommResources: peer ", p, " is reached by ",
                     transportName(comm.transportTo(p)),
                     ", not CUDA IPC; the collectives need CUDA IPC to every peer; multi-node algorithms are "
                     "not built yet");
    }
  }
  MESHCOMM_CUDA_CHECK(cudaDeviceGetAttribute(&t.smCount, cudaDevAttrMultiProcessorCount, comm.cudaDevice()));
  return t;
}

// One registered buffer of this rank and its mapping on every peer ([rank] = the local registration).
struct SharedBuffer {
  GpuBuffer buffer;
  std::vector<RegisteredMemory> byRank;
};

// The tokens one rank gives a peer for its channelsPerPeer semaphores: the pools and (pool, offset) pairs.
struct TokenEntry {
  uint64_t pool;
  uint64_t offset;
};

}  // namespace

struct CommResources::State {
  SharedBuffer scratch;
  SharedBuffer packets;
  std::vector<std::shared_ptr<Connection>> connections;
  std::vector<Communicator::Token> inboundTokens;        // [peer * cpp + c]
  std::vector<std::vector<RegisteredMemory>> peerPools;  // [peer]: the peer's token pools mapped here
  std::vector<MemoryChannelDeviceHandle> channels;       // host copy of the device array
  GpuBuffer deviceChannels;
  GpuBuffer devicePeerScratch;
  GpuBuffer devicePeerPackets;
  std::vector<std::unique_ptr<GpuBuffer>> deviceWords;
  std::map<std::string, std::shared_ptr<void>> shared;
  std::unique_ptr<BufferRegistry> registry;  // last: its peer mappings go first
};

namespace {

void shareBuffers(Communicator& comm, SharedBuffer& scratch, SharedBuffer& packets) {
  scratch.byRank =
      exchangeWithAllPeers(comm, comm.registerMemory(scratch.buffer.data(), scratch.buffer.size()),
                           kScratchTag, "CommResources: the scratch buffer");
  packets.byRank =
      exchangeWithAllPeers(comm, comm.registerMemory(packets.buffer.data(), packets.buffer.size()),
                           kPacketTag, "CommResources: the packet buffer");
}

// Sends this rank's inbound tokens for `peer` (channel order) as: count header, pools, entries.
void sendTokens(Communicator& comm, const Communicator::Token* tokens, size_t count, int peer) {
  std::vector<RegisteredMemory> pools;
  std::vector<TokenEntry> entries(count);
  for (size_t c = 0; c < count; ++c) {
    auto it = std::find_if(pools.begin(), pools.end(),
                           [&](const RegisteredMemory& m) { return m.impl() == tokens[c].pool.impl(); });
    if (it == pools.end()) it = pools.insert(pools.end(), tokens[c].pool);
    entries[c] = {static_cast<uint64_t>(it - pools.begin()), tokens[c].offset};
  }
  const uint64_t header[2] = {pools.size(), count};
  comm.bootstrap().send(header, sizeof(header), peer, kTokenTag);
  for (const auto& pool : pools) comm.sendMemory(pool, peer, kTokenTag);
  comm.bootstrap().send(entries.data(), entries.size() * sizeof(TokenEntry), peer, kTokenTag);
}

// Receives a peer's tokens and returns their addresses as mapped here (validated: they come from the
// network).
std::vector<uint64_t*> recvTokens(Communicator& comm, int peer, size_t count,
                                  std::vector<RegisteredMemory>& pools) {
  const int rank = comm.rank();
  uint64_t header[2];
  comm.bootstrap().recv(header, sizeof(header), peer, kTokenTag);
  MESHCOMM_REQUIRE(header[1] == count && header[0] >= 1 && header[0] <= count, "rank ", rank,
                   ": CommResources: peer ", peer, " sent ", header[1], " semaphore tokens in ", header[0],
                   " pools, expected ", count);
  for (uint64_t i = 0; i < header[0]; ++i) {
    pools.push_back(comm.recvMemory(peer, kTokenTag));
    MESHCOMM_REQUIRE(pools.back().isMapped() && pools.back().rank() == peer, "rank ", rank,
                     ": CommResources: the semaphore token pool of peer ", peer, " is not mapped here");
  }
  std::vector<TokenEntry> entries(count);
  comm.bootstrap().recv(entries.data(), count * sizeof(TokenEntry), peer, kTokenTag);
  std::vector<uint64_t*> out(count);
  for (size_t c = 0; c < count; ++c) {
    const TokenEntry e = entries[c];
    const bool ok = e.pool < pools.size() && e.offset % sizeof(uint64_t) == 0 &&
                    e.offset + sizeof(uint64_t) <= pools[e.pool].size();
    MESHCOMM_REQUIRE(ok, "rank ", rank, ": CommResources: peer ", peer, " sent an invalid token for channel ",
                     c, " (pool ", e.pool, ", offset ", e.offset, ")");
    out[c] = reinterpret_cast<uint64_t*>(static_cast<char*>(pools[e.pool].data()) + e.offset);
  }
  return out;
}

template <typename T>
GpuBuffer uploadArray(const std::vector<T>& host) {
  GpuBuffer buffer(std::max<size_t>(host.size() * sizeof(T), sizeof(T)));
  copyToDevice(buffer.data(), host.data(), host.size() * sizeof(T));
  return buffer;
}

std::vector<void*> pointers(const SharedBuffer& b) {
  std::vector<void*> out;
  for (const auto& m : b.byRank) out.push_back(m.data());
  return out;
}

}  // namespace

CommResources::CommResources(Communicator& comm, const CommResourcesConfig& config)
    : comm_(comm), state_(std::make_unique<State>()) {
  CudaDeviceGuard guard(comm.cudaDevice());
  topology_ = buildTopology(comm);
  const int rank = topology_.rank, n = topology_.nRanks;
  const ResolvedConfig cfg = resolveConfig(rank, config);
  checkConfigAgrees(comm.bootstrap(), cfg);
  const size_t cpp = cfg.channelsPerPeer;
  State& s = *state_;

  s.scratch.buffer = GpuBuffer(cfg.scratchBytes, GpuMemoryKind::CudaMalloc);
  s.packets.buffer = GpuBuffer(cfg.packetBytes, GpuMemoryKind::CudaMalloc);
  shareBuffers(comm, s.scratch, s.packets);

  s.connections.resize(n);
  for (int p = 0; p < n; ++p) {
    if (p != rank) s.connections[p] = comm.connect(p, kConnectionTag);
  }

  s.inboundTokens.resize(n * cpp);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t c = 0; c < cpp; ++c) s.inboundTokens[p * cpp + c] = comm.allocateToken();
    sendTokens(comm, &s.inboundTokens[p * cpp], cpp, p);
  }
  s.peerPools.resize(n);
  s.channels.assign(n * cpp, MemoryChannelDeviceHandle{});
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    const std::vector<uint64_t*> remote = recvTokens(comm, p, cpp, s.peerPools[p]);
    for (size_t c = 0; c < cpp; ++c) {
      MemoryChannelDeviceHandle& h = s.channels[p * cpp + c];
      h.semaphore.local.inbound = s.inboundTokens[p * cpp + c].devicePtr();
      h.semaphore.local.expectedInbound = comm.allocateCounter();
      h.semaphore.remoteInbound = remote[c];
      h.semaphore.spin = comm.spinContext(p);
      h.dst = s.scratch.byRank[p].data();
      h.src = s.scratch.buffer.data();
      h.packetBuffer = s.packets.buffer.data();
    }
  }

  s.deviceChannels = uploadArray(s.channels);
  s.devicePeerScratch = uploadArray(pointers(s.scratch));
  s.devicePeerPackets = uploadArray(pointers(s.packets));

  view_.rank = rank;
  view_.nRanks = n;
  view_.channelsPerPeer = static_cast<int>(cpp);
  view_.channels = static_cast<MemoryChannelDeviceHandle*>(s.deviceChannels.data());
  view_.peerScratch = static_cast<void**>(s.devicePeerScratch.data());
  view_.peerPackets = static_cast<void**>(s.devicePeerPackets.data());
  view_.scratchBytes = cfg.scratchBytes;
  view_.packetBytes = cfg.packetBytes;
  s.registry = std::make_unique<BufferRegistry>(comm);
}

CommResources::~CommResources() {
  // No kernel may still use the buffers, tokens or handles; Comm has already passed its bootstrap barrier.
  {
    CudaDeviceGuard guard(comm_.cudaDevice());
    (void)cudaDeviceSynchronize();
  }
  // Release in the reverse order of construction.
  State& s = *state_;
  s.registry.reset();
  s.shared.clear();
  s.deviceWords.clear();
  s.devicePeerPackets = GpuBuffer();
  s.devicePeerScratch = GpuBuffer();
  s.deviceChannels = GpuBuffer();
  s.channels.clear();
  s.peerPools.clear();
  s.inboundTokens.clear();
  s.connections.clear();
  s.packets.byRank.clear();
  s.scratch.byRank.clear();
  state_.reset();  // the buffers themselves
}

size_t CommResources::reservePacketRegion(size_t bytes, size_t alignment) {
  const int rank = topology_.rank;
  MESHCOMM_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0, "rank ", rank,
                   ": reservePacketRegion: alignment ", alignment, " is not a power of two");
  const size_t offset = (packetReserved_ + alignment - 1) & ~(alignment - 1);
  if (offset > view_.packetBytes || bytes > view_.packetBytes - offset) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": reservePacketRegion: ", bytes,
                   " bytes do not fit in the packet buffer (", packetReserved_, " of ", view_.packetBytes,
                   " bytes already reserved); raise MESHCOMM_PACKET_BYTES");
  }
  packetReserved_ = offset + bytes;
  return offset;
}

uint64_t* CommResources::allocateDeviceWords(size_t count) {
  MESHCOMM_REQUIRE(count > 0, "rank ", topology_.rank, ": allocateDeviceWords: count must be positive");
  CudaDeviceGuard guard(comm_.cudaDevice());
  state_->deviceWords.push_back(std::make_unique<GpuBuffer>(count * sizeof(uint64_t)));
  return static_cast<uint64_t*>(state_->deviceWords.back()->data());
}

std::shared_ptr<void>& CommResources::sharedState(const std::string& key) {
  return state_->shared[key];
}

BufferRegistry& CommResources::registry() const {
  return *state_->registry;
}

std::shared_ptr<Connection> CommResources::connection(int peer) const {
  MESHCOMM_REQUIRE(peer >= 0 && peer < topology_.nRanks && peer != topology_.rank, "rank ", topology_.rank,
                   ": CommResources::connection: peer ", peer, " is not another rank of ", topology_.nRanks);
  return state_->connections[peer];
}

const RegisteredMemory& CommResources::scratchMemory(int r) const {
  MESHCOMM_REQUIRE(r >= 0 && r < topology_.nRanks, "rank ", topology_.rank,
                   ": CommResources::scratchMemory: rank ", r, " is not one of ", topology_.nRanks);
  return state_->scratch.byRank[r];
}

}  // namespace meshcomm
