// The LL (low-latency packet) reduction kernel and the Algorithm class template of the three LL reduction
// algorithms. Each algorithm file instantiates one mode:
//   OneShot        (allreduce_oneshot_ll):  every rank sends its whole input to every peer; every rank
//                                           reduces everything.
//   ReduceScatter  (reduce_scatter_ll):     rank p receives input chunk p of every peer; reduces it.
//   TwoShot        (allreduce_twoshot_ll):  reduce-scatter to segment owners, then each owner sends its
//                                           reduced segment to every peer.
// (Reduce to a root: reduce_direct.cu, plain stores and chunk flags instead of packets.)
//
// Packet region (reserved in initialize(), same offset in every rank's packet buffer):
//   [half 2][area kAreas][slot nRanks][slotBytes]      slot r = packets written by rank r
// area 0 = contributions to reduce (RS), area 1 (TwoShot) = reduced segments (AG). A pack (16 payload
// bytes) travels as two LL16 packets, laid out by packPacketIndex (groups of 32 packs, so a warp's stores
// are contiguous); a slot holds whole groups. The half is the epoch's parity.
//
// Why a half is free when a rank writes into it (epoch e, half e%2): the writer finished its call e-1, in
// which it received at least one packet from every peer (every mode guarantees that: oneshot/RS send
// count >= 1 elements to every peer; twoshot requires every segment non-empty), so every peer had started
// call e-1, hence (stream order) finished call e-2, the last call that used this half. Stale packets of
// earlier uses carry older flags, so a reader never accepts them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "collectives/algorithms/reduction_common.cuh"

namespace meshcomm::reduction {

enum class LLMode { OneShot, ReduceScatter, TwoShot };

template <LLMode M>
constexpr Layout kLLLayout = M == LLMode::OneShot         ? Layout::Whole
                             : M == LLMode::ReduceScatter ? Layout::Strided
                                                          : Layout::Split;
template <LLMode M>
constexpr int kLLAreas = M == LLMode::TwoShot ? 2 : 1;

// Block b handles packs [b*P/nBlocks...) of every segment (P = the largest segment's pack count); thread t
// handles the same packs j in every phase, so in-place calls read each input pack before (in program order
// of the same thread) the output pack at the same address is written.
template <DataType D, ReduceOp Op, LLMode M>
__global__ void __launch_bounds__(kMaxThreads) llReduceKernel(RegionCallArgs a) {
  constexpr int kAreas = kLLAreas<M>;
  const CommDeviceView& v = a.view;
  const int n = v.nRanks;
  const int me = v.rank;
  const device::Reducer<D, Op> red(a.red);
  const Segments<kLLLayout<M>> seg(n, a.bytes);
  const LLEpoch ep = beginLLEpoch(a.epoch);
  const BlockRange range(seg.maxPacks(), blockIdx.x, gridDim.x);
  const uint64_t slotPackets = a.slotBytes / sizeof(LL16Packet);
  // Slot 0 of area `ar` (this call's half) in rank r's packet buffer, as mapped here.
  auto area = [&](int r, int ar) {
    return reinterpret_cast<LL16Packet*>(static_cast<char*>(v.peerPackets[r]) + a.regionOffset +
                                         (static_cast<uint64_t>(ep.half) * kAreas + ar) * n * a.slotBytes);
  };

  // Phase 1: contributions (prescaled) to the owners (slot `me` of area 0 in every peer's region).
  for (uint64_t j = range.begin + threadIdx.x; j < range.end; j += blockDim.x) {
    if constexpr (M == LLMode::OneShot) {
      const uint4 x = red.prescale(loadPack(a.input, j, a.bytes, alignClass(a.input)));
      for (int i = 0; i < n - 1; ++i) {
        const int p = device::peerAt(v, i);
        writePackLL(area(p, 0) + me * slotPackets, j, x, ep.flag);
      }
    } else {
      for (int i = 0; i < n - 1; ++i) {
        const int p = device::peerAt(v, i);
        if (j < seg.packs(p)) {
          const char* src = a.input + seg.start(p);
          writePackLL(area(p, 0) + me * slotPackets, j,
                      red.prescale(loadPack(src, j, seg.length(p), alignClass(src))), ep.flag);
        }
      }
    }
  }

  // Phase 2: reduce the own segment in rank order (own input from local memory), write the output;
  // TwoShot: also send the result to every peer (slot `me` of area 1).
  SpinContext ctx = anySpinContext(v);
  const uint32_t peersMask = ((1u << n) - 1u) & ~(1u << me);
  const char* ownIn = a.input + seg.start(me);
  const uint64_t ownLen = seg.length(me);
  char* out = a.output + (M == LLMode::TwoShot ? seg.start(me) : 0);
  bool ok = true;
  for (uint64_t j = range.begin + threadIdx.x; j < range.end && j < seg.packs(me); j += blockDim.x) {
    // The own input is loaded before the poll, so it is in a register when the peers' packets arrive.
    const uint4 own = loadPack(ownIn, j, ownLen, alignClass(ownIn));
    const GatherPacksPoll got = gatherPacksLL(area(me, 0), slotPackets, j, peersMask, ep.flag, ctx, ok);
    if (!ok) break;
    const uint4 r = reduceRankOrder(red, got.vals, own, me, n);
    storePack(out, j, ownLen, alignClass(out), r);
    if constexpr (M == LLMode::TwoShot) {
      for (int i = 0; i < n - 1; ++i)
        writePackLL(area(device::peerAt(v, i), 1) + me * slotPackets, j, r, ep.flag);
    }
  }

  // Phase 3 (TwoShot): the peers' reduced segments into the output.
  if constexpr (M == LLMode::TwoShot) {
    for (uint64_t j = range.begin + threadIdx.x; ok && j < range.end; j += blockDim.x) {
      uint32_t mask = 0;
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r)
        if (r < n && r != me && j < seg.packs(r)) mask |= 1u << r;
      const GatherPacksPoll got = gatherPacksLL(area(me, 1), slotPackets, j, mask, ep.flag, ctx, ok);
      if (!ok) break;
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r) {
        if (mask & (1u << r)) {
          char* dst = a.output + seg.start(r);
          storePack(dst, j, seg.length(r), alignClass(dst), got.vals[r]);
        }
      }
    }
  }

  __syncthreads();
  finishLLEpoch(a.epoch, ep);
}

// Packet bytes per slot for a call of `bytes` (see RegionCallArgs::bytes).
template <LLMode M>
uint64_t llSlotBytesFor(int nRanks, uint64_t bytes) {
  return packRegionBytes(Segments<kLLLayout<M>>(nRanks, bytes).maxPacks());
}

// The Algorithm of one LL mode. `maxBytes`: the largest RegionCallArgs::bytes it is built for;
// `budgetFraction`: the share of the packet buffer it may reserve (the slot shrinks to fit; calls that do not
// fit are unsupported). `packsPerBlock`: default work per block (blocks = packs / packsPerBlock, 1..min(SMs,
// 64)).
template <LLMode M>
class LLReductionAlgorithm : public ReductionAlgorithm {
 public:
  LLReductionAlgorithm(std::string name, Collective c, uint64_t maxBytes, double budgetFraction,
                       int packsPerBlock)
      : ReductionAlgorithm(std::move(name), c),
        maxBytes_(maxBytes),
        budgetFraction_(budgetFraction),
        packsPerBlock_(packsPerBlock) {}

  void initialize(CommResources& resources) override {
    recordResources(resources);
    const uint64_t perSlotBudget =
        static_cast<uint64_t>(static_cast<double>(packetBytes_) * budgetFraction_) /
        (2ull * kLLAreas<M> * nRanks_);
    const uint64_t slot = std::min<uint64_t>(llSlotBytesFor<M>(nRanks_, maxBytes_),
                                             perSlotBudget / kPackGroupBytes * kPackGroupBytes);
    region_.reserve(resources, slot, 2ull * kLLAreas<M> * nRanks_ * slot);
  }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = commonReason(args, topo);
    if (!r.empty()) return r;
    const uint64_t bytes = args.count * dataTypeSize(args.dtype);
    if (M == LLMode::TwoShot && packsOf(bytes) < static_cast<uint64_t>(topo.nRanks)) {
      return detail::concat("message of ", bytes, " bytes is below ", kPackBytes * topo.nRanks,
                            " (every rank must own a non-empty segment; use allreduce_oneshot_ll)");
    }
    if (llSlotBytesFor<M>(topo.nRanks, bytes) > region_.slotBytes) {
      return detail::concat("message of ", bytes, " bytes", M == LLMode::ReduceScatter ? " per rank" : "",
                            " exceeds the packet region (", region_.slotBytes,
                            " packet bytes per slot; MESHCOMM_PACKET_BYTES=", packetBytes_, ")");
    }
    return {};
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    const uint64_t packs =
        Segments<kLLLayout<M>>(topo.nRanks, args.count * dataTypeSize(args.dtype)).maxPacks();
    return blocksForPacks(packs, packsPerBlock_, maxBlocks(topo), 512);
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    if (args.count == 0) return;
    const CommTopology& topo = resources.topology();
    const LaunchConfig c = resolveConfig(config, defaultConfig(args, topo), maxBlocks(topo));
    const RegionCallArgs a = regionCallArgs(resources, args, region_);
    dispatch(args, [&](auto tag) {
      using Tag = decltype(tag);
      llReduceKernel<Tag::kType, Tag::kOp, M><<<c.nBlocks, c.nThreadsPerBlock, 0, args.stream>>>(a);
    });
  }

 private:
  static constexpr int kMaxBlocksCap = 64;
  static_assert(kMaxBlocksCap <= static_cast<int>(kLLEpochWords), "a block's epoch word must exist");
  static int maxBlocks(const CommTopology& topo) { return std::min(kMaxBlocksCap, smCountOf(topo)); }

  uint64_t maxBytes_;
  double budgetFraction_;
  int packsPerBlock_;
  ReductionRegion region_;
};

}  // namespace meshcomm::reduction
