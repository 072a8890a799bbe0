// broadcast_scratch: the pairwise scratch pipeline between the root and every other rank: the root puts
// its input into every peer's scratch slot [root] (all peers in flight), each peer copies it out to its
// output. Root: input -> output locally unless in place (input == output). Non-root pairs are idle.
// Bandwidth limit: the root's NVLink egress carries (n-1) copies (see docs/collectives.md).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

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
    a.roundBytes = a.streams.pieceCap(plan.bytes, kChainRounds) * static_cast<uint64_t>(blocks);
    a.root = plan.root;
    broadcastChainKernel<<<blocks, threads, 0, args.stream>>>(a);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeBroadcastChain() {
  return std::make_shared<BroadcastChain>();
}
std::shared_ptr<Algorithm> makeBroadcastScratch() {
  return std::make_shared<SimpleEngineAlgorithm<BroadcastPlan>>("broadcast_scratch", Collective::Broadcast);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
