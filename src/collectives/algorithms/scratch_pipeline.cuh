// The pipelined scratch reduction kernel and the Algorithm class template of the three scratch reduction
// algorithms (large messages, any size, one launch). Each algorithm file instantiates one mode:
//   AllReduce      (allreduce_rsag):          reduce-scatter to segment owners + all-gather of the results;
//   ReduceScatter  (reduce_scatter_scratch):  reduce-scatter only (segment p = input chunk p);
//   Reduce         (reduce_scratch):          reduce-scatter over the n-1 non-root ranks (the root owns no
//                                             segment; see PipeSegments), then every owner sends its result
//                                             to the root.
//
// Block b uses channel b (with every peer) and owns a private part of every rank's scratch:
//   [block nBlocks][slot 2][area kAreas][source rank nRanks][tileBytes]
// area 0 (RS) holds the peers' contributions to this rank's segment, area 1 (AG) the peers' reduced
// segments. Block b handles packs [b*P/nBlocks ...) of every segment (P = the largest segment's pack
// count) in rounds of tileBytes; round i uses slot i%2. Per block, on every rank:
//   barrier (signal + wait every peer: scratch of the previous call is free)
//   put(0)                                   A: tile 0 of segment p -> RS[slot][me] of p, for every peer p
//   for i in rounds:                          then __syncthreads + signal every peer ("RS(i) landed")
//     C(i): wait every peer (RS(i)); reduce own tile in rank order (own input from local memory, peers'
//           from RS[i%2][r]); AllReduce: write own output + the result into AG[i%2][me] of every peer;
//           ReduceScatter: write own output; Reduce: owners (non-root) write the result into AG[i%2][me]
//           of the root (the root owns an empty segment and only waits)
//     D(i): AllReduce: __syncthreads + signal every peer; Reduce (non-root): signal the root
//     put(i+1) (if any)
//     E(i): AllReduce / Reduce root: wait every peer (AG(i)), copy AG[i%2][p] into the output
// Signals sent to a peer on the block's channel, in order: barrier, RS(0), [AG(0)], RS(1), [AG(1)], ...;
// the peer waits for them in the same order, whatever the data sizes (empty tiles still signal).
// Scratch reuse: a write into a peer's slot s at round i happens after this rank saw the peer's RS(i)
// (AG writes, in C(i)) or RS(i) signal before put(i+1) (RS writes); the peer sent that signal after it
// finished reading slot s at round i-2 (AG: E(i-2) precedes put(i)) or i-1 (RS: C(i-1) precedes put(i)).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "collectives/algorithms/reduction_common.cuh"
#include "meshcomm/device/copy.hpp"

namespace meshcomm::reduction {

enum class PipeMode { AllReduce, ReduceScatter, Reduce };

template <PipeMode M>
constexpr Layout kPipeLayout = M == PipeMode::ReduceScatter ? Layout::Strided : Layout::Split;
template <PipeMode M>
constexpr int kPipeAreas = M == PipeMode::ReduceScatter ? 1 : 2;

// The segments of a pipeline mode. AllReduce / ReduceScatter: Segments<kPipeLayout<M>> over all n ranks.
// Reduce (n > 1): the root owns nothing; the message is split over the n-1 other ranks (owner index
// p < root ? p : p-1). Every rank then sends and receives the message size once (the root receives only
// the reduced segments), instead of the root also receiving the contributions to its own segment
// (2(n-1)/n of the message through the root's inbound links). Reduce with n == 1: the root owns all.
template <PipeMode M>
struct PipeSegments {
  Segments<kPipeLayout<M>> s;
  int root;
  bool rootless;  // Reduce with n > 1

  MESHCOMM_HOST_DEVICE_INLINE PipeSegments(int n, uint64_t bytes, int r)
      : s(M == PipeMode::Reduce && n > 1 ? n - 1 : n, bytes),
        root(r),
        rootless(M == PipeMode::Reduce && n > 1) {}

  MESHCOMM_HOST_DEVICE_INLINE int owner(int p) const { return rootless && p > root ? p - 1 : p; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t start(int p) const {
    return rootless && p == root ? 0 : s.start(owner(p));
  }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t length(int p) const {
    return rootless && p == root ? 0 : s.length(owner(p));
  }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t maxPacks() const { return s.maxPacks(); }
};

struct PipeArgs {
  CommDeviceView view;
  const char* input;
  char* output;        // reduce: used on the root only
  uint64_t bytes;      // allreduce/reduce: message bytes; reduce-scatter: bytes per rank
  uint64_t tilePacks;  // packs per (block, slot, area, source) tile
  uint32_t nRounds;    // rounds per block (the same on every rank and block)
  int root;            // reduce
  ReduceParams red;
};

// Independent 16-byte loads per thread in flight: in the reduction (packs per step; times n loads) and in
// the copies (put into the peers' scratch, copy-out of the peers' results).
constexpr int kReduceUnroll = 1;
constexpr int kCopyUnroll = 4;

template <DataType D, ReduceOp Op, PipeMode M>
__global__ void __launch_bounds__(kMaxThreads) pipelineReduceKernel(PipeArgs a) {
  constexpr int kAreas = kPipeAreas<M>;
  const CommDeviceView& v = a.view;
  const int n = v.nRanks;
  const int me = v.rank;
  const int c = blockIdx.x;
  const device::Reducer<D, Op> red(a.red);
  const PipeSegments<M> seg(n, a.bytes, a.root);
  const BlockRange range(seg.maxPacks(), blockIdx.x, gridDim.x);
  const uint64_t tileBytes = a.tilePacks * kPackBytes;
  const uint64_t blockBase = static_cast<uint64_t>(blockIdx.x) * 2 * kAreas * n * tileBytes;
  const bool gathers = M == PipeMode::AllReduce || (M == PipeMode::Reduce && me == a.root);
  // Rank r's scratch (as mapped here): this block's tile of (slot, area, source).
  auto scratchAt = [&](int r, uint32_t slot, int area, int src) {
    return static_cast<char*>(v.peerScratch[r]) + blockBase + ((slot * kAreas + area) * n + src) * tileBytes;
  };
  // Round i covers packs [t0, t1) of every segment (relative to the segment's start).
  auto tileStart = [&](uint32_t i) { return std::min(range.begin + i * a.tilePacks, range.end); };
  auto tileEnd = [&](uint32_t i) { return std::min(range.begin + (i + 1) * a.tilePacks, range.end); };
  // Bytes of segment p inside packs [t0, t1).
  auto bytesIn = [&](int p, uint64_t t0, uint64_t t1) -> uint64_t {
    const uint64_t len = seg.length(p);
    const uint64_t b0 = t0 * kPackBytes;
    const uint64_t b1 = std::min(t1 * kPackBytes, len);
    return b1 > b0 ? b1 - b0 : 0;
  };
  // A(i) + B(i): tile i of segment p (prescaled) into RS[i%2][me] of every peer p, then signal every peer.
  auto put = [&](uint32_t i) {
    const uint64_t t0 = tileStart(i), t1 = tileEnd(i);
    for (int k = 0; k < n - 1; ++k) {
      const int p = device::peerAt(v, k);
      const uint64_t nb = bytesIn(p, t0, t1);
      if (nb > 0) {
        copyPrescaled<kCopyUnroll>(red, scratchAt(p, i & 1, 0, me), a.input + seg.start(p) + t0 * kPackBytes,
                                   nb, threadIdx.x, blockDim.x);
      }
    }
    __syncthreads();
    device::signalAllPeers(v, c);
  };

  if (!device::barrierAllPeers(v, c)) return;
  put(0);
  for (uint32_t i = 0; i < a.nRounds; ++i) {
    const uint32_t slot = i & 1;
    const uint64_t t0 = tileStart(i), t1 = tileEnd(i);
    // C(i): reduce the own tile.
    if (!device::waitAllPeers(v, c)) return;
    const uint64_t ownBytes = bytesIn(me, t0, t1);
    const char* ownIn = a.input + seg.start(me) + t0 * kPackBytes;
    const uint32_t inAlign = alignClass(ownIn);
    char* ownOut = nullptr;
    if constexpr (M == PipeMode::ReduceScatter) {
      ownOut = a.output + t0 * kPackBytes;
    } else if (M == PipeMode::AllReduce || me == a.root) {
      ownOut = a.output + seg.start(me) + t0 * kPackBytes;
    }
    const uint32_t outAlign = alignClass(ownOut);
    const uint64_t ownPacks = packsOf(ownBytes);
    // kReduceUnroll packs per thread per step: all their loads are issued before the first reduction, so
    // (kReduceUnroll * n) independent 16-byte loads are in flight per thread.
    for (uint64_t q0 = threadIdx.x; q0 < ownPacks; q0 += kReduceUnroll * blockDim.x) {
      uint4 vals[kReduceUnroll][kMaxRanks];
      uint4 own[kReduceUnroll];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {
        const uint64_t q = q0 + static_cast<uint64_t>(u) * blockDim.x;
#pragma unroll
        for (int r = 0; r < kMaxRanks; ++r) {
          vals[u][r] = make_uint4(0, 0, 0, 0);
          if (q < ownPacks && r < n && r != me)
            vals[u][r] = loadPack(scratchAt(me, slot, 0, r), q, ownBytes, 16);
        }
        own[u] = q < ownPacks ? loadPack(ownIn, q, ownBytes, inAlign) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {
        const uint64_t q = q0 + static_cast<uint64_t>(u) * blockDim.x;
        if (q >= ownPacks) break;
        const uint4 res = reduceRankOrder(red, vals[u], own[u], me, n);
        if (ownOut != nullptr) storePack(ownOut, q, ownBytes, outAlign, res);
        if constexpr (M == PipeMode::AllReduce) {
          for (int k = 0; k < n - 1; ++k)
            storePack(scratchAt(device::peerAt(v, k), slot, 1, me), q, ownBytes, 16, res);
        } else if constexpr (M == PipeMode::Reduce) {
          if (me != a.root) storePack(scratchAt(a.root, slot, 1, me), q, ownBytes, 16, res);
        }
      }
    }
    // D(i): results landed.
    if constexpr (M == PipeMode::AllReduce) {
      __syncthreads();
      device::signalAllPeers(v, c);
    } else if constexpr (M == PipeMode::Reduce) {
      if (me != a.root) {
        __syncthreads();
        if (threadIdx.x == 0) device::channelRef(v, a.root, c).signal();
      }
    }
    // Overlap: the next round's contributions go out before this round's results are copied out.
    if (i + 1 < a.nRounds) put(i + 1);
    // E(i): the peers' results into the output.
    if (gathers) {
      if (!device::waitAllPeers(v, c)) return;
      for (int k = 0; k < n - 1; ++k) {
        const int p = device::peerAt(v, k);
        const uint64_t nb = bytesIn(p, t0, t1);
        if (nb > 0) {
          device::copy<kCopyUnroll>(a.output + seg.start(p) + t0 * kPackBytes, scratchAt(me, slot, 1, p), nb,
                                    threadIdx.x, blockDim.x);
        }
      }
    }
  }
}

// The Algorithm of one pipeline mode. Blocks: at most channelsPerPeer (one channel per block), the SM
// count (co-residency of blocks that wait on each other across ranks) and what the scratch can split.
template <PipeMode M>
class PipelineReductionAlgorithm : public ReductionAlgorithm {
 public:
  // One block per SM on most of the GPU: NVLink needs many bytes in flight (32 blocks left ~100 SMs idle
  // and reached ~70% of the link). Clamped by channelsPerPeer (MESHCOMM_CHANNELS_PER_PEER, default 128).
  static constexpr int kDefaultBlocks = 128;
  static constexpr int kDefaultThreads = 512;
  static constexpr uint64_t kTargetRounds = 4;         // rounds per block the tile size aims for
  static constexpr uint64_t kMinTilePacks = 1024;      // 16 KiB: below this the signals dominate
  static constexpr uint64_t kMinPacksPerBlock = 1024;  // 16 KiB: smaller messages use fewer blocks

  PipelineReductionAlgorithm(std::string name, Collective c) : ReductionAlgorithm(std::move(name), c) {}

  void initialize(CommResources& resources) override { recordResources(resources); }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = commonReason(args, topo);
    if (!r.empty()) return r;
    if (topo.nRanks > 1 && channelsPerPeer_ < 1) return "needs at least one channel per peer";
    if (maxBlocks(topo) < 1) {
      return detail::concat("scratch of ", scratchBytes_, " bytes is too small (MESHCOMM_SCRATCH_BYTES)");
    }
    return {};
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    const uint64_t packs =
        PipeSegments<M>(topo.nRanks, args.count * dataTypeSize(args.dtype), args.root).maxPacks();
    return blocksForPacks(packs, kMinPacksPerBlock, std::min(kDefaultBlocks, maxBlocks(topo)),
                          kDefaultThreads);
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    if (args.count == 0) return;
    const CommTopology& topo = resources.topology();
    const LaunchConfig c = resolveConfig(config, defaultConfig(args, topo), maxBlocks(topo));
    const int n = topo.nRanks;
    PipeArgs a;
    a.view = resources.view();
    a.input = static_cast<const char*>(args.input);
    a.output = static_cast<char*>(args.output);
    a.bytes = args.count * dataTypeSize(args.dtype);
    a.root = args.root;
    a.red = makeReduceParams(args.op, n);
    const uint64_t perBlock = ceilDiv(PipeSegments<M>(n, a.bytes, a.root).maxPacks(), c.nBlocks);
    const uint64_t maxTile = maxTilePacks(c.nBlocks);
    a.tilePacks = std::min(maxTile, std::max(kMinTilePacks, ceilDiv(perBlock, kTargetRounds)));
    a.tilePacks =
        std::max<uint64_t>(1, std::min(alignTilePacks(a.tilePacks), std::max<uint64_t>(perBlock, 1)));
    a.nRounds = static_cast<uint32_t>(std::max<uint64_t>(1, ceilDiv(perBlock, a.tilePacks)));
    dispatch(args, [&](auto tag) {
      using Tag = decltype(tag);
      pipelineReduceKernel<Tag::kType, Tag::kOp, M><<<c.nBlocks, c.nThreadsPerBlock, 0, args.stream>>>(a);
    });
  }

 private:
  // Packs per tile when the scratch is split over nBlocks blocks (2 slots x areas x nRanks tiles each).
  uint64_t maxTilePacks(int nBlocks) const {
    return scratchBytes_ / (static_cast<uint64_t>(nBlocks) * 2 * kPipeAreas<M> * nRanks_) / kPackBytes;
  }
  int maxBlocks(const CommTopology& topo) const {
    uint64_t m = std::min<uint64_t>(smCountOf(topo), topo.nRanks > 1 ? channelsPerPeer_ : 1024);
    m = std::min<uint64_t>(m, scratchBytes_ / (2ull * kPipeAreas<M> * nRanks_ * kPackBytes));
    return static_cast<int>(m);
  }
};

}  // namespace meshcomm::reduction
