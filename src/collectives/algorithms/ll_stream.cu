// sendrecv_ll, alltoallv_ll (host-side counts), gather_stream, scatter_stream: per-pair byte streams as LL16
// packets for the pairs whose larger direction fits the LL capacity, the pairwise engine (pairwiseKernel)
// for the others, in one algorithm so that both sides of every pair take the same path (ll_stream.hpp says
// how; docs/collectives.md, "LL streams", has the whole design).
//
// LL pair (rank, p), per call, block (p, c) of llStreamKernel:
//   send part: block c == 0 writes the header {bytes I send to p, signature} as 2 packets at the start of
//              p's region, slot [rank], half (pair epoch & 1); every block writes its share of my send
//              stream for p as LL16 packets after the header (packet k = stream bytes [8k, 8k+8)).
//   recv part: every block unpacks its share of the stream it expects (my receive bytes) as the packets
//              arrive, without waiting for p's header; a packet that p's header (its byte count) shows p
//              never writes is skipped. Meanwhile the last thread of block c == 0 reads the header and
//              reports a mismatch (expected = my receive bytes, observed = p's); then the pair epoch
//              advances (PairEpochs, as the LL exchange: every thread writes its share of the words).
// The header guarantees >= 1 packet each way per LL pair and call (the half-reuse argument of PairEpochs).
// Plans (the streams of a call): SendRecvPlan (per-peer segment lists), StridedPlan (sendrecv_ll's groups
// of at most one send and one receive per peer at strided addresses, e.g. an alltoall, a gather, a ring
// step: addresses by arithmetic, strided_group.cuh; gather_stream and scatter_stream: the collective as
// such a group), AllToAllPlan<HostCounts> (alltoallv_ll). An even exchange (evenExchangeBytes: a strided
// group with the same bytes to and from every other rank) of LL pairs runs the LL exchange kernel instead,
// which speaks this protocol (LLExchange::streamHeader), so its peers may run llStreamKernel against it.
#include <memory>

#include "collectives/algorithms/ll_stream.hpp"
#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "collectives/algorithms/strided_group.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

constexpr uint64_t kPk = LL16Packet::kPayloadBytes;

// The LL pairs of one launch: block b serves peers[b / blocksPerPeer] with index b % blocksPerPeer; blocks
// past nPeers * blocksPerPeer only do their share of the self copy.
struct LLStreamGrid {
  int8_t peers[kLLStreamMaxRanks];
  int nPeers;
  int blocksPerPeer;
  uint32_t parts;  // LLStreamPart bits

  // The peer of the i-th pair (pure). With every other rank an LL pair the list is rank+1, rank+2, ...
  // (splitPairs' order): computed, which keeps a dependent constant-cache load off the kernel's start.
  __device__ int peer(const CommDeviceView& v, int i) const {
    return nPeers == v.nRanks - 1 ? (v.rank + 1 + i) % v.nRanks : peers[i];
  }
};

// Writes packets [pk0, pk1) of the byte stream into dst[k] with `flag`; whole block. Packets inside one
// segment go through device::putPackets (weak loads; each packet one 16-byte volatile store of payload and
// flag, no fence: the flag publishes the payload); a packet that an operation boundary cuts is assembled
// by one thread (gatherPacket) and written the same way.
__device__ void putPacketsOf(const SegStream& s, LL16Packet* dst, uint64_t pk0, uint64_t pk1, uint32_t flag) {
  walkPackets(
      s.segs, s.n, s.bytes, pk0, pk1,
      [&](int i, uint64_t lo, uint64_t kLo, uint64_t kHi) {
        device::putPackets(dst + kLo, s.segs[i].ptr + (kLo * kPk - lo), (kHi - kLo) * kPk, flag, threadIdx.x,
                           blockDim.x);
        return true;
      },
      [&](int i, uint64_t lo, uint64_t k) {
        if (threadIdx.x == static_cast<uint32_t>(i) % blockDim.x) {
          uint32_t v1, v2;
          gatherPacket(s.segs, s.n, i, lo, k, v1, v2);
          dst[k].write(v1, v2, flag);
        }
        return true;
      });
}
// Contiguous stream: device::putPackets over the range (same memory order).
__device__ void putPacketsOf(const ContigStream& s, LL16Packet* dst, uint64_t pk0, uint64_t pk1,
                             uint32_t flag) {
  const uint64_t off = pk0 * kPk;
  device::putPackets(dst + pk0, s.ptr + off, minU(s.bytes, pk1 * kPk) - off, flag, threadIdx.x, blockDim.x);
}

// absent(p) of device::awaitPacket / getPackets for packet k0 + p of a stream: the sender's header has
// arrived and its byte count ends the stream at or before that packet (one 16-byte volatile load of header
// packet 0, acquire by flag).
struct StreamEndsBefore {
  const LL16Packet* header;
  uint64_t k0;
  uint32_t flag;
  __device__ bool operator()(uint64_t p) const {
    uint32_t lo, hi;
    return header[0].tryRead(flag, lo, hi) && ((static_cast<uint64_t>(hi) << 32) | lo) <= (k0 + p) * kPk;
  }
};

// Receives packets [pk0, pk1) of the stream into its bytes below `limit` (device::getPackets per segment,
// skipping packets past the sender's stream; a packet that a segment end cuts is awaited and scattered by
// one thread). False when a spin failed.
__device__ bool getPacketsOf(const SegStream& s, const LL16Packet* packets, const LL16Packet* header,
                             uint64_t limit, uint64_t pk0, uint64_t pk1, uint32_t flag,
                             const SpinContext& ctx) {
  return walkPackets(
      s.segs, s.n, limit, pk0, pk1,
      [&](int i, uint64_t lo, uint64_t kLo, uint64_t kHi) {
        return device::getPackets(s.segs[i].ptr + (kLo * kPk - lo), packets + kLo, (kHi - kLo) * kPk, flag,
                                  threadIdx.x, blockDim.x, ctx, StreamEndsBefore{header, kLo, flag});
      },
      [&](int i, uint64_t lo, uint64_t k) {
        if (threadIdx.x != static_cast<uint32_t>(i) % blockDim.x) return true;
        uint32_t v[2] = {0, 0};
        const auto w = device::awaitPacket(packets, k, flag, ctx, v, StreamEndsBefore{header, 0, flag});
        if (w == device::PacketWait::Arrived) scatterPacket(s.segs, s.n, i, lo, k, limit, v[0], v[1]);
        return w != device::PacketWait::Failed;
      });
}
// Contiguous stream: one device::getPackets over the range.
__device__ bool getPacketsOf(const ContigStream& s, const LL16Packet* packets, const LL16Packet* header,
                             uint64_t limit, uint64_t pk0, uint64_t pk1, uint32_t flag,
                             const SpinContext& ctx) {
  const uint64_t off = pk0 * kPk;
  return device::getPackets(s.ptr + off, packets + pk0, minU(limit, pk1 * kPk) - off, flag, threadIdx.x,
                            blockDim.x, ctx, StreamEndsBefore{header, pk0, flag});
}

// One launch of the LL part of a call (parts: send, self copy, receive; see the top of this file).
// Memory order: LL packets only (payload and flag in one 16-byte store, readers spin on the flag; no
// fence, no semaphore); the epoch words are written (PairEpochs::advance) after __syncthreads() once every
// packet read of the block is done, and read by the next launch (kernel boundary). A failed spin ends the
// block's reads; the block still advances its epoch (the communicator is dead then: the error is fatal).
template <class Plan>
__global__ void __launch_bounds__(kLLThreads)
    llStreamKernel(CommDeviceView v, PacketRegion r, PairEpochs ep, const __grid_constant__ LLStreamGrid g,
                   const __grid_constant__ Plan plan) {
  const int B = g.blocksPerPeer;
  const int b = static_cast<int>(blockIdx.x);
  const int peer = b < g.nPeers * B ? g.peer(v, b / B) : -1;
  const int c = b % B;
  uint64_t epoch = 0;
  uint32_t flag = 0;
  if (peer >= 0) {
    epoch = ep.load(peer, c);
    flag = llPacketFlag(epoch);
  }
  if (peer >= 0 && (g.parts & kPartSend)) {
    auto* out = reinterpret_cast<LL16Packet*>(r.outbox(v, peer, epoch & 1));
    const auto send = plan.send(v, peer);
    if (c == 0 && threadIdx.x == 0)
      writeHeader(reinterpret_cast<char*>(out), send.bytes, plan.sendSig(peer), flag);
    const PacketRange pr = llPacketRange(send.bytes, B, c);
    if (pr.pk0 < pr.pk1) putPacketsOf(send, out + kLLStreamHeaderPackets, pr.pk0, pr.pk1, flag);
  }
  if (g.parts & kPartSelf) plan.selfCopy(v, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
  if (peer < 0 || !(g.parts & kPartRecv)) return;

  const SpinContext ctx = device::channelRef(v, peer, 0).semaphore.spin;
  const auto* header = reinterpret_cast<const LL16Packet*>(r.inbox(v, peer, epoch & 1));
  const auto recv = plan.recv(v, peer);
  // The header (count check; >= 1 packet of p's call read per call): the block's last thread reads it
  // while the others wait for their packets (at small sizes it has none), both packets in one poll.
  if (c == 0 && threadIdx.x == blockDim.x - 1) {
    uint64_t peerBytes = 0, peerSig = 0;
    if (readHeader(reinterpret_cast<const char*>(header), flag, ctx, peerBytes, peerSig) &&
        (peerBytes != recv.bytes || peerSig != plan.recvSig(peer)))
      reportMismatch(ctx, peer, recv.bytes, peerBytes);
  }
  // My share of the stream I expect (my receive bytes; never past my buffers, <= the LL capacity since this
  // pair is LL), without waiting for p's header first: packets p does not send are skipped once its
  // header shows its count. A false return (timeout / abort) is recorded; the block just finishes.
  const PacketRange pr = llPacketRange(recv.bytes, B, c);
  if (pr.pk0 < pr.pk1)
    getPacketsOf(recv, header + kLLStreamHeaderPackets, header, recv.bytes, pr.pk0, pr.pk1, flag, ctx);
  __syncthreads();  // every packet read of this block is done before the epoch moves on
  ep.advance(peer, c, B, epoch, threadIdx.x, blockDim.x);
}

// pairwiseKernel's view of a split call: the plan restricted to the pairs the LL kernels do not run.
// active: pure (reads the by-value plan); selfCopy: Plan::selfCopy (weak local copy) when selfHere.
template <class Plan>
struct ScratchPairs : Plan {
  uint32_t llPairs;  // bit p: pair (rank, p) runs in the LL kernels
  bool selfHere;     // this launch does the self copy
  __device__ bool active(const CommDeviceView& v, int p) const {
    return !((llPairs >> p) & 1u) && Plan::active(v, p);
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (selfHere) Plan::selfCopy(v, part, nParts, tid, nt);
  }
};

// Base of sendrecv_ll and alltoallv_ll: the pairwise engine (header region, epochs, default config: the
// engine's, identical on every rank) plus an LL region [2][n][llStreamSlotBytes(capacity)] and its pair
// epochs. Supports every size: pairs above the capacity run in the engine.
class LLStreamAlgorithm : public EngineAlgorithm {
 public:
  LLStreamAlgorithm(std::string name, Collective collective)
      : EngineAlgorithm(std::move(name), collective, /*needsHeader=*/true) {}

  // The default (sendrecv_ll, gather_stream, scatter_stream; alltoallv_ll has its own): depends only on the
  // topology and on limits that are an error on any rank (as sendrecv_scratch); a collective's group has no
  // P2P operations to count, so only the rank limit of the pair masks applies to it.
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return sendRecvReason(engineReason(topo), args, topo.nRanks);
  }

  void initialize(CommResources& resources) override {
    EngineAlgorithm::initialize(resources);
    const CommDeviceView& v = resources.view();
    if (v.nRanks < 2) return;
    for (uint64_t capacity : kLLStreamCapacities) {
      try {
        region_ = reservePacketRegion(resources, llStreamSlotBytes(capacity));
        capacity_ = capacity;
        break;
      } catch (const std::exception&) {
        // the packet buffer cannot hold this capacity; try a smaller one (same outcome on every rank)
      }
    }
    if (capacity_ == 0) return;  // no LL region: every pair runs in the pipeline (still correct)
    epochs_.stride = kLLMaxBlocksPerPeer;
    epochs_.words = resources.allocateDeviceWords(static_cast<size_t>(v.nRanks) * kLLMaxBlocksPerPeer);
  }

 protected:
  // The kernels of one call and their shape (ll_stream.hpp: splitPairs, planLaunches, llStreamShape), from
  // this rank's view of the call (pairBytes of its plan).
  struct StreamCall {
    PairSplit split;
    StreamLaunches launches;
    LLStreamShape shape;
    LLStreamGrid grid{};
    int threads = 0;
  };
  StreamCall planCall(CommResources& resources, const LaunchConfig& config, const PairBytes& bytes) const {
    const CommDeviceView& v = resources.view();
    StreamCall call;
    call.split = splitPairs(v.rank, v.nRanks, bytes, capacity_);
    call.launches = planLaunches(call.split, bytes.self);
    call.threads = normalizeThreads(config.nThreadsPerBlock, kLLThreads, 32, kLLThreads);
    call.shape = llStreamShape(call.split, bytes.selfBytes, call.threads, resources.topology());
    for (int i = 0; i < call.split.nLL; ++i) call.grid.peers[i] = static_cast<int8_t>(call.split.llPeers[i]);
    call.grid.nPeers = call.split.nLL;
    call.grid.blocksPerPeer = call.shape.blocksPerPeer;
    return call;
  }

  // One LL stream kernel of a call with `parts` (Plan: the call's plan or a plan of the same streams).
  template <class Plan>
  void launchLL(CommResources& resources, const StreamCall& call, uint32_t parts, const Plan& plan,
                cudaStream_t stream) {
    LLStreamGrid g = call.grid;
    g.parts = parts;
    llStreamKernel<Plan><<<llStreamBlocks(call.shape, parts), call.threads, 0, stream>>>(
        resources.view(), region_, epochs_, g, plan);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }

  // An even exchange of b bytes (evenExchangeBytes) whose pairs are all LL (b <= the capacity): one LL
  // exchange kernel speaking this protocol (the peers may run llStreamKernel against it), on this
  // algorithm's region and epochs; blocks per peer as llStreamShape's. False (nothing launched) otherwise.
  bool launchEvenExchange(CommResources& resources, const LaunchConfig& config, const StridedGroup& g,
                          cudaStream_t stream) {
    const CommDeviceView& v = resources.view();
    const uint64_t b = evenExchangeBytes(g, v.rank, v.nRanks);
    if (b == 0 || b > capacity_) return false;
    const int threads = normalizeThreads(config.nThreadsPerBlock, kLLThreads, 32, kLLThreads);
    const int perPeer = llBlocksPerPeer(b, threads, resources.topology());
    LLExchange x;
    x.input = reinterpret_cast<const char*>(g.sendBase);
    x.output = reinterpret_cast<char*>(g.recvBase);
    x.bytes = b;
    x.srcStride = g.sendStride;
    x.dstStride = g.recvStride;
    x.selfBytes = ((g.sendPeers >> v.rank) & 1u) ? b : 0;
    x.streamHeader = true;
    launchLLExchange(v, region_, epochs_, LLGrid{perPeer, perPeer * (v.nRanks - 1)}, threads, x, stream);
    return true;
  }

  // Every kernel of a call whose pairs carry `bytes` (pairBytes of the plan's source), in stream order: the
  // LL kernel(s) and/or the pipeline.
  template <class Plan>
  void launchCall(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
                  const PairBytes& bytes, const Plan& plan) {
    const StreamCall call = planCall(resources, config, bytes);
    if (call.launches.before) launchLL(resources, call, call.launches.before, plan, args.stream);
    if (call.launches.engine)
      launchEngine(resources, args, config,
                   ScratchPairs<Plan>{plan, call.split.llPairs, call.launches.engineSelf});
    if (call.launches.after) launchLL(resources, call, call.launches.after, plan, args.stream);
  }

 private:
  PacketRegion region_;
  PairEpochs epochs_;
  uint64_t capacity_ = 0;
};

class SendRecvLL : public LLStreamAlgorithm {
 public:
  SendRecvLL() : LLStreamAlgorithm("sendrecv_ll", Collective::SendRecv) {}
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    const SendRecvPlan plan = makeSendRecvPlan(args, v.rank, v.nRanks);
    if (args.numP2POps == 0) return;
    // A strided group: the same protocol, addresses by arithmetic (strided_group.cuh); an even one of LL
    // pairs through the LL exchange kernel.
    StridedGroup g;
    if (!stridedGroup(plan, v.rank, v.nRanks, g)) {
      launchCall(resources, args, config, pairBytes(plan, v.rank, v.nRanks), plan);
    } else if (!launchEvenExchange(resources, config, g, args.stream)) {
      launchCall(resources, args, config, pairBytes(g, v.rank, v.nRanks), StridedPlan(g));
    }
  }
};

class AllToAllvLL : public LLStreamAlgorithm {
 public:
  AllToAllvLL() : LLStreamAlgorithm("alltoallv_ll", Collective::AllToAllv) {}
  // Every reason depends on arguments every rank passes alike (counts location, in place) or on the
  // topology, so all ranks accept or decline a call together.
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = engineReason(topo);
    if (!r.empty()) return r;
    if (args.input == args.output && args.input != nullptr) return "in-place alltoallv is not supported";
    if (args.countsLocation == CountsLocation::Device) {
      return "device-side counts: the host cannot see the sizes that choose LL or the pipeline per pair "
             "(alltoallv_scratch runs them)";
    }
    if (topo.nRanks > kMaxHostCountRanks) {
      return detail::concat("host-side counts support at most ", kMaxHostCountRanks, " ranks");
    }
    return {};
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    MESHCOMM_REQUIRE(args.countsLocation == CountsLocation::Host, "rank ", v.rank,
                     ": alltoallv_ll: device-side counts are not supported (alltoallv_scratch runs them)");
    AllToAllPlan<HostCounts> plan;
    plan.input = const_cast<char*>(static_cast<const char*>(args.input));
    plan.output = static_cast<char*>(args.output);
    plan.counts = makeHostCounts(args, v.rank, v.nRanks);
    launchCall(resources, args, config, pairBytes(plan.counts, v.rank, v.nRanks), plan);
  }
};

// gather_stream, scatter_stream: the collective as the strided group nccl-tests posts for it (rootedGroup),
// moved like sendrecv_ll moves that group: LL packets for pairs up to the capacity, the pairwise engine
// above. Every rank computes every pair's counts from the same arguments (count, root), so both sides of a
// pair pick the same path; the header still checks them.
class RootedStream : public LLStreamAlgorithm {
 public:
  RootedStream(std::string name, Collective collective, RootedDirection direction)
      : LLStreamAlgorithm(std::move(name), collective), direction_(direction) {}
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
    if (bytes == 0) return;  // equal on every rank
    const StridedGroup g =
        rootedGroup(direction_, v.rank, v.nRanks, args.root, args.input, args.output, bytes);
    launchCall(resources, args, config, pairBytes(g, v.rank, v.nRanks), StridedPlan(g));
  }

 private:
  RootedDirection direction_;
};

}  // namespace

std::shared_ptr<Algorithm> makeGatherStream() {
  return std::make_shared<RootedStream>("gather_stream", Collective::Gather, RootedDirection::Gather);
}
std::shared_ptr<Algorithm> makeScatterStream() {
  return std::make_shared<RootedStream>("scatter_stream", Collective::Scatter, RootedDirection::Scatter);
}
std::shared_ptr<Algorithm> makeSendRecvLL() {
  return std::make_shared<SendRecvLL>();
}
std::shared_ptr<Algorithm> makeAllToAllvLL() {
  return std::make_shared<AllToAllvLL>();
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
