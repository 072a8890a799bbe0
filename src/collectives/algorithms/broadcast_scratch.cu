// broadcast_scratch: the pairwise scratch pipeline between the root and every other rank: the root puts
// its input into every peer's scratch slot [root] (all peers in flight), each peer copies it out to its
// output. Root: input -> output locally unless in place (input == output). Non-root pairs are idle.
// Bandwidth limit: the root's NVLink egress carries (n-1) copies (see docs/collectives.md).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {
namespace {

struct BroadcastPlan : RootedPlanBase {
  __device__ ContigStream send(const CommDeviceView& v, int) const {
    return v.rank == root ? ContigStream{input, bytes} : ContigStream{};
  }
  __device__ ContigStream recv(const CommDeviceView&, int peer) const {
    return peer == root ? ContigStream{output, bytes} : ContigStream{};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (v.rank == root) copyShare(output, input, bytes, part, nParts, tid, nt);
  }
};

// broadcast_sag (scatter + all-gather among the non-roots, two pairwise-engine launches on the stream):
// the message is cut into n-1 16-byte-aligned pieces, piece k for the k-th non-root after the root
// (k = (rank - root - 1) mod n). Launch 1 (BcastScatterPlan): the root sends piece k(p) to rank p, which
// writes it into its output at the piece's offset; the root copies input -> output (skipped in place).
// Launch 2 (BcastForwardPlan, n > 2): every non-root sends its piece (from its output, complete since
// launch 1 finished on this stream) to every other non-root; root pairs are idle. Per-rank egress: root S,
// non-root (n-2)/(n-1)·S (broadcast_scratch: root (n-1)·S). Each launch is an ordinary engine call (the
// engine's persistent credits order the buffer reuse between them).
struct BcastPieces {
  __device__ static uint64_t per(uint64_t bytes, int n) {
    return roundUp16(divUp(bytes, static_cast<uint64_t>(n - 1)));
  }
  // Piece of rank r (r != root): [off, off + len) of the message.
  __device__ static Piece of(uint64_t bytes, int n, int root, int r) {
    const uint64_t k = static_cast<uint64_t>((r - root - 1 + n) % n);
    const uint64_t p = per(bytes, n);
    const uint64_t off = minU(bytes, k * p);
    return {off, minU(bytes, off + p) - off};
  }
};

struct BcastScatterPlan : RootedPlanBase {
  __device__ ContigStream send(const CommDeviceView& v, int peer) const {
    if (v.rank != root) return {};
    const Piece p = BcastPieces::of(bytes, v.nRanks, root, peer);
    return {input + p.off, p.len};
  }
  __device__ ContigStream recv(const CommDeviceView& v, int peer) const {
    if (peer != root) return {};
    const Piece p = BcastPieces::of(bytes, v.nRanks, root, v.rank);
    return {output + p.off, p.len};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (v.rank == root) copyShare(output, input, bytes, part, nParts, tid, nt);
  }
};

struct BcastForwardPlan : RootedPlanBase {
  __device__ bool active(const CommDeviceView& v, int peer) const { return v.rank != root && peer != root; }
  __device__ ContigStream send(const CommDeviceView& v, int) const {
    const Piece p = BcastPieces::of(bytes, v.nRanks, root, v.rank);
    return {output + p.off, p.len};
  }
  __device__ ContigStream recv(const CommDeviceView& v, int peer) const {
    const Piece p = BcastPieces::of(bytes, v.nRanks, root, peer);
    return {output + p.off, p.len};
  }
  __device__ void selfCopy(const CommDeviceView&, uint32_t, uint32_t, uint32_t, uint32_t) const {}
};

class BroadcastSag : public EngineAlgorithm {
 public:
  BroadcastSag() : EngineAlgorithm("broadcast_sag", Collective::Broadcast, /*needsHeader=*/false) {}
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return engineReason(topo);
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const auto scatter = planFromArgs<BcastScatterPlan>(args);
    if (scatter.bytes == 0) return;  // equal on every rank
    launchEngine(resources, args, config, scatter);
    if (resources.view().nRanks <= 2) return;  // one non-root: it has the whole message already
    launchEngine(resources, args, config, planFromArgs<BcastForwardPlan>(args));
  }
};

// broadcast_pipe: broadcast_sag's two steps in ONE pairwise-engine launch, pipelined. Every pair is active:
// root pairs carry piece k(p) from the root into p's output, non-root pairs forward each one's piece to
// the other. On a non-root rank p, the forwarding block (q, c) puts its piece t only after p's root-pair
// block (root, c) has copied piece t of the same stream out of scratch into p's output: rounds are sized
// by the piece size (roundBasis) on every pair, so block c's piece t is the same byte range in both
// streams. Link words (algorithm-owned, per rank): [0] generation (launches so far), [1] arrival count,
// [2 + c] progress of root-pair block c = (generation + 1) << 32 | (pieces copied out); monotonic over
// calls. Publish: the block's copy-out stores, __syncthreads, thread 0 __threadfence + release store;
// wait: thread 0 acquire spin, then __syncthreads. The generation is read by every block at its start and
// advanced by the last block to arrive (after every block read it); the next launch is stream-ordered.
// Deadlock-free: root pairs depend only on the root, which depends on nothing; forwarding waits only on
// root pairs (all blocks co-resident, as the engine already requires).
struct BcastPipePlan : RootedPlanBase {
  static constexpr bool kLinked = true;
  uint64_t* link;  // [2 + kEngineLanes]

  __device__ bool active(const CommDeviceView&, int) const { return true; }
  __device__ ContigStream send(const CommDeviceView& v, int peer) const {
    if (peer == root) return {};
    const Piece p = BcastPieces::of(bytes, v.nRanks, root, v.rank == root ? peer : v.rank);
    return {(v.rank == root ? input : output) + p.off, p.len};
  }
  __device__ ContigStream recv(const CommDeviceView& v, int peer) const {
    if (v.rank == root) return {};
    const Piece p = BcastPieces::of(bytes, v.nRanks, root, peer == root ? v.rank : peer);
    return {output + p.off, p.len};
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (v.rank == root) copyShare(output, input, bytes, part, nParts, tid, nt);
  }
  __device__ uint64_t roundBasis(const CommDeviceView& v, uint64_t) const {
    return BcastPieces::per(bytes, v.nRanks);
  }
  __device__ uint64_t linkGeneration() const { return *static_cast<volatile const uint64_t*>(link); }
  __device__ static uint64_t progress(uint64_t gen, uint64_t t) { return ((gen + 1) << 32) | (t + 1); }
  __device__ bool waitLinked(const CommDeviceView& v, int peer, int c, uint64_t t, uint64_t gen,
                             const SpinContext& ctx) const {
    if (v.rank == root || peer == root) return true;  // only forwarding waits
    const uint64_t want = progress(gen, t);
    const uint64_t* word = link + 2 + c;
    return device::spinUntil(
        [&](uint64_t& seen) {
          seen = device::loadAcquireSys(word);
          return seen >= want;
        },
        ctx, DeviceOp::SemaphoreWait, want);
  }
  __device__ void publishLinked(const CommDeviceView& v, int peer, int c, uint64_t t, uint64_t gen) const {
    if (v.rank == root || peer != root) return;  // only the non-root side of a root pair publishes
    __threadfence();
    device::storeReleaseSys(link + 2 + c, progress(gen, t));
  }
  __device__ void arriveLinked(uint64_t gen) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (device::fetchAddRelaxedGpu(link + 1, 1) == gridDim.x - 1) {
        // every block has read the generation and finished its waits and publishes
        *static_cast<volatile uint64_t*>(link + 1) = 0;
        *static_cast<volatile uint64_t*>(link) = gen + 1;
      }
    }
  }
};

class BroadcastPipe : public EngineAlgorithm {
 public:
  BroadcastPipe() : EngineAlgorithm("broadcast_pipe", Collective::Broadcast, /*needsHeader=*/false) {}
  void initialize(CommResources& resources) override {
    EngineAlgorithm::initialize(resources);
    link_ = resources.allocateDeviceWords(2 + static_cast<size_t>(kEngineLanes));
  }
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return engineReason(topo);
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    auto plan = planFromArgs<BcastPipePlan>(args);
    plan.link = link_;
    if (plan.bytes == 0) return;  // equal on every rank
    launchEngine(resources, args, config, plan);
  }

 private:
  uint64_t* link_ = nullptr;
};

// broadcast_chain: the message flows root -> r_1 -> ... -> r_{n-1} (r_k = (root + k) mod n) in pieces through
// the stream engine's buffers (runChainLane, engine_streams.cuh); every rank copies each piece into its
// output and, unless it is the tail, on into the next rank's buffer. Every rank receives and sends the
// message once (NCCL's ring broadcast); the pieces pipeline, so the n-1 hops cost only the fill time.
// In place on the root: nothing is copied locally.
struct BcastChainArgs {
  CommDeviceView view;
  EngineStreams streams;  // blocksPerPeer = the grid size
  const char* input;
  char* output;
  uint64_t bytes;
  uint64_t roundBytes;
  int root;
};

__global__ void __launch_bounds__(kEngineThreads) broadcastChainKernel(BcastChainArgs a) {
  const CommDeviceView& v = a.view;
  const int n = v.nRanks, me = v.rank, pos = (me - a.root + n) % n;
  const ChainLinks links{pos > 0 ? (me - 1 + n) % n : -1, pos < n - 1 ? (me + 1) % n : -1};
  runChainLane(a.streams, v, links, a.bytes, a.roundBytes, chainSpinContext(v, links),
               [&](const Piece& p, const char* in, char* next, uint32_t tid, uint32_t nThreads) {
                 const char* src = in ? in : a.input + p.off;
                 if (next) copyBytes(next, src, p.len, tid, nThreads);
                 char* dst = a.output + p.off;
                 if (dst != src) copyBytes(dst, src, p.len, tid, nThreads);
               });
}

class BroadcastChain : public EngineAlgorithm {
 public:
  BroadcastChain() : EngineAlgorithm("broadcast_chain", Collective::Broadcast, /*needsHeader=*/false) {}
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return engineReason(topo);
  }
  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    return {chainBlocks(args.count * dataTypeSize(args.dtype), topo.smCount), kEngineThreads};
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const auto plan = planFromArgs<RootedPlanBase>(args);
    if (plan.bytes == 0) return;  // equal on every rank
    const CommTopology& topo = resources.topology();
    const int maxBlocks = std::max(1, std::min(kEngineLanes, topo.smCount));
    BcastChainArgs a;
    a.view = resources.view();
    a.streams = engineStreams();
    MESHCOMM_REQUIRE(a.view.nRanks < 2 || a.streams.pieceMax > 0, "rank ", a.view.rank,
                     ": broadcast_chain: no engine stream buffers (MESHCOMM_PACKET_BYTES too small)");
    const int blocks =
        config.nBlocks > 0 ? std::min(config.nBlocks, maxBlocks) : chainBlocks(plan.bytes, topo.smCount);
    const int threads = normalizeThreads(config.nThreadsPerBlock, kEngineThreads, 64, kEngineThreads);
    a.streams.blocksPerPeer = blocks;
    a.input = plan.input;
    a.output = plan.output;
    a.bytes = plan.bytes;
    a.roundBytes = a.streams.pieceCap(plan.bytes) * static_cast<uint64_t>(blocks);
    a.root = plan.root;
    broadcastChainKernel<<<blocks, threads, 0, args.stream>>>(a);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeBroadcastChain() {
  return std::make_shared<BroadcastChain>();
}
std::shared_ptr<Algorithm> makeBroadcastPipe() {
  return std::make_shared<BroadcastPipe>();
}
std::shared_ptr<Algorithm> makeBroadcastScratch() {
  return std::make_shared<SimpleEngineAlgorithm<BroadcastPlan>>("broadcast_scratch", Collective::Broadcast);
}
std::shared_ptr<Algorithm> makeBroadcastSag() {
  return std::make_shared<BroadcastSag>();
}

}  // namespace meshcomm::movement
