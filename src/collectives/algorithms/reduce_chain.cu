// reduce_chain: reduce to a root of any size in one launch, as a pipelined chain through the stream engine's
// buffers (engine_streams.cuh): with r_k = (root + k) mod n, rank r_{n-1} sends its input, every r_k (k >= 1)
// adds its input to the partial from r_{k+1} and sends the sum on to r_{k-1}, and the root adds its input
// and writes the result. Every rank sends and receives the message once (the bandwidth optimum of a
// reduce); the pieces pipeline, so the chain's n-1 hops cost only the fill time.
//
// The chain driver (runChainLane, engine_streams.cuh) moves the pieces; per piece the block computes
// out = (upstream partial resumed) + own input, stored as a partial into the downstream rank's buffer (or
// finished into the output on the root).
// Arithmetic: elements are accumulated in chain order r_{n-1}, ..., r_1, root and every partial is rounded
// to the element type at each hop (as NCCL's ring reduce); the tests' tolerance covers any order.
// Non-roots never touch their output (it may be null). In place works on the root (each thread reads its
// input pack before it writes the same output pack).
#include <algorithm>
#include <memory>
#include <string>

#include "collectives/algorithms/engine_streams.cuh"
#include "collectives/algorithms/reduction_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {
namespace {

constexpr int kChainThreads = 512;
constexpr int kChainUnroll = 4;  // packs per thread with all their loads in flight

struct ChainArgs {
  CommDeviceView view;
  movement::EngineStreams streams;  // blocksPerPeer = the grid size
  const char* input;
  char* output;
  uint64_t bytes;
  uint64_t roundBytes;
  int root;
  ReduceParams red;
};

template <DataType D, ReduceOp Op>
__global__ void __launch_bounds__(kChainThreads) reduceChainKernel(ChainArgs a) {
  const CommDeviceView& v = a.view;
  const int n = v.nRanks, me = v.rank;
  const int pos = (me - a.root + n) % n;  // this rank is r_pos
  // r_{pos+1} sends me its partial; r_{pos-1} gets mine.
  const movement::ChainLinks links{pos < n - 1 ? (me + 1) % n : -1, pos > 0 ? (me - 1 + n) % n : -1};
  const device::Reducer<D, Op> red(a.red);
  movement::runChainLane(
      a.streams, v, links, a.bytes, a.roundBytes, movement::chainSpinContext(v, links),
      [&](const movement::Piece& p, const char* partialIn, char* partialOut, uint32_t tid,
          uint32_t nThreads) {
        const char* own = a.input + p.off;
        const uint32_t ownAlign = alignClass(own);
        char* dst = partialOut ? partialOut : a.output + p.off;
        const uint32_t dstAlign = partialOut ? 16u : alignClass(dst);
        const uint64_t packs = packsOf(p.len);
        for (uint64_t q0 = tid; q0 < packs; q0 += static_cast<uint64_t>(kChainUnroll) * nThreads) {
          uint4 x[kChainUnroll], y[kChainUnroll];
#pragma unroll
          for (int u = 0; u < kChainUnroll; ++u) {
            const uint64_t q = q0 + static_cast<uint64_t>(u) * nThreads;
            x[u] = q < packs ? loadPack(own, q, p.len, ownAlign) : make_uint4(0, 0, 0, 0);
            y[u] = q < packs && partialIn ? loadPack(partialIn, q, p.len, 16) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int u = 0; u < kChainUnroll; ++u) {
            const uint64_t q = q0 + static_cast<uint64_t>(u) * nThreads;
            if (q >= packs) break;
            typename device::Reducer<D, Op>::Accs acc;
            if (partialIn) {
              red.resume(acc, y[u]);
              red.accumulate(acc, x[u]);
            } else {
              red.first(acc, x[u]);
            }
            storePack(dst, q, p.len, dstAlign, partialOut ? red.partial(acc) : red.finish(acc));
          }
        }
      });
}

class ReduceChain : public ReductionAlgorithm {
 public:
  ReduceChain() : ReductionAlgorithm("reduce_chain", Collective::Reduce) {}

  void initialize(CommResources& resources) override {
    recordResources(resources);
    streams_ = movement::sharedEngineStreams(resources);
  }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = commonReason(args, topo);
    if (!r.empty()) return r;
    if (topo.nRanks > 1 && streams_.pieceMax == 0)
      return "the packet buffer has no room for the engine's stream buffers (MESHCOMM_PACKET_BYTES)";
    return {};
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    return {movement::chainBlocks(args.count * dataTypeSize(args.dtype), smCountOf(topo)), kChainThreads};
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    if (args.count == 0) return;
    const CommTopology& topo = resources.topology();
    LaunchConfig c = resolveConfig(config, defaultConfig(args, topo), maxBlocks(topo));
    c.nThreadsPerBlock = std::max(c.nThreadsPerBlock, 64);  // compute warps + the publisher warp
    MESHCOMM_REQUIRE(topo.nRanks < 2 || streams_.pieceMax > 0, "rank ", rank_,
                     ": reduce_chain: no engine stream buffers (MESHCOMM_PACKET_BYTES too small)");
    ChainArgs a;
    a.view = resources.view();
    a.streams = streams_;
    a.streams.blocksPerPeer = c.nBlocks;
    a.input = static_cast<const char*>(args.input);
    a.output = static_cast<char*>(args.output);
    a.bytes = args.count * dataTypeSize(args.dtype);
    a.roundBytes = a.streams.pieceCap(a.bytes, movement::kChainRounds) * static_cast<uint64_t>(c.nBlocks);
    a.root = args.root;
    a.red = makeReduceParams(args.op, topo.nRanks);
    dispatch(args, [&](auto tag) {
      using Tag = decltype(tag);
      reduceChainKernel<Tag::kType, Tag::kOp><<<c.nBlocks, c.nThreadsPerBlock, 0, args.stream>>>(a);
    });
  }

 private:
  int maxBlocks(const CommTopology& topo) const { return std::min(movement::kEngineLanes, smCountOf(topo)); }

  movement::EngineStreams streams_;
};

}  // namespace

std::shared_ptr<Algorithm> makeReduceChain() {
  return std::make_shared<ReduceChain>();
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
