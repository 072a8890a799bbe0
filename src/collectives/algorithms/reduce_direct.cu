// reduce_direct: reduce to a root in one hop of plain stores. Every non-root rank stores its (prescaled)
// input with 16-byte stores into its slot of the root's region and publishes each 512-byte chunk with a
// release flag (the call's epoch); the root reduces each chunk in rank order once every non-root's flag for
// it is in (its own input read locally). Half the NVLink bytes of LL packets (no flag words inside the
// payload) and one hop instead of reduce_chain's n-1.
//
// Region (reserved in initialize(), same offset in every rank's packet buffer):
//   data   [half 2][source nRanks][slotBytes]            slot s = bytes stored by rank s
//   tokens [half 2][source nRanks] u64                   token s = the epoch of rank s's last call
//   flags  [half 2][source nRanks][slotBytes / 512] u64  flag (s, k) = epoch once chunk k of slot s is in
// The half is the epoch's parity.
//
// Call e, per block:
//   1. e > 1, blocks that write into peers (every block of a non-root; block 0 of the root): wait until
//      every peer's token in half (e-1)%2 of this rank's region has reached e-1, then __syncthreads;
//   2. block 0: token e into half e%2 of every peer's region;
//   3. non-root warps: store their run of chunks into slot `me` of the root (all stores in flight),
//      __syncwarp, then each lane publishes flags of the run with st.release.sys (cumulative over the
//      warp's stores through the barrier); root warps: acquire every non-root's flags of their run,
//      __syncwarp, reduce the run.
// The message is cut into chunks of kChunkPacks packs (one pack per lane); warp w of the grid takes a
// contiguous run of chunks (BlockRange over all warps). The split may differ between ranks (flags are per
// chunk, not per warp).
//
// Why half h = e%2 of peer p is free when a rank writes into it at call e: it has seen p's token e-1, which
// p wrote in call e-1 after its own step 1 (p had finished reading the tokens of e-2, the last reads of half
// h in tokens) and after p's call e-2 ended (stream order: p's flag and data reads of half h). Tokens in one
// slot only grow (e-2, e, ...), so a wait for ">= e-1" cannot miss an overwritten value; stale flags hold
// older epochs and a reader accepts only its own. Roots may change from call to call.
// The wait sits at the start of the next call rather than the end of this one: back to back, a non-root
// stores call e+1 while the root still reduces e, and the root never waits for a round trip.
#include <algorithm>
#include <memory>
#include <string>

#include "collectives/algorithms/reduction_common.cuh"
#include "meshcomm/device/atomics.hpp"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {
namespace {

constexpr uint64_t kChunkPacks = 32;                        // one pack per lane: the unit of a flag
constexpr uint64_t kChunkBytes = kChunkPacks * kPackBytes;  // 512
constexpr int kStoreUnroll = 4;                             // packs per lane in flight on the store side
constexpr int kDirectThreads = 512;

// Data and flag addresses of one call's half in rank r's region (as mapped on this rank).
struct DirectRegion {
  const CommDeviceView& v;
  const RegionCallArgs& a;
  uint32_t half;

  MESHCOMM_DEVICE_INLINE char* base(int r) const {
    return static_cast<char*>(v.peerPackets[r]) + a.regionOffset;
  }
  MESHCOMM_DEVICE_INLINE char* slot(int r, int src) const {
    return base(r) + (static_cast<uint64_t>(half) * v.nRanks + src) * a.slotBytes;
  }
  MESHCOMM_DEVICE_INLINE uint64_t* token(int r, uint32_t h, int src) const {
    auto* tokens = reinterpret_cast<uint64_t*>(base(r) + 2ull * v.nRanks * a.slotBytes);
    return tokens + static_cast<uint64_t>(h) * v.nRanks + src;
  }
  MESHCOMM_DEVICE_INLINE uint64_t* flag(int r, int src, uint64_t chunk) const {
    const uint64_t chunksPerSlot = a.slotBytes / kChunkBytes;
    uint64_t* flags = token(r, 0, 0) + 2ull * v.nRanks;
    return flags + (static_cast<uint64_t>(half) * v.nRanks + src) * chunksPerSlot + chunk;
  }
};

// Spins until *f == value (acquire: the writer's release covers the data of its chunk). False on timeout.
MESHCOMM_DEVICE_INLINE bool awaitFlag(const uint64_t* f, uint64_t value, SpinContext& ctx) {
  return device::spinUntil(
      [&](uint64_t& seen) {
        seen = device::loadAcquireSys(f);
        return seen == value;
      },
      ctx, DeviceOp::PacketRead, value);
}

// Spins until the token *t has reached `epoch` (relaxed: an execution signal, it orders no data; the reuse
// argument only needs the peer's progress). False on timeout.
MESHCOMM_DEVICE_INLINE bool awaitToken(const uint64_t* t, uint64_t epoch, SpinContext& ctx) {
  return device::spinUntil(
      [&](uint64_t& seen) {
        seen = device::loadRelaxedSys(t);
        return device::reached(seen, epoch);
      },
      ctx, DeviceOp::PacketRead, epoch);
}

template <DataType D, ReduceOp Op>
__global__ void __launch_bounds__(kDirectThreads) reduceDirectKernel(RegionCallArgs a, int rootRank) {
  const CommDeviceView& v = a.view;
  const int n = v.nRanks;
  const int me = v.rank;
  const device::Reducer<D, Op> red(a.red);
  const LLEpoch ep = beginLLEpoch(a.epoch);
  const DirectRegion reg{v, a, ep.half};
  const uint64_t packs = packsOf(a.bytes);
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warpsPerBlock = blockDim.x / 32;
  const BlockRange run(ceilDiv(packs, kChunkPacks), blockIdx.x * warpsPerBlock + threadIdx.x / 32,
                       gridDim.x * warpsPerBlock);
  const uint64_t q1 = std::min(run.end * kChunkPacks, packs);
  SpinContext ctx = anySpinContext(v);
  bool ok = true;
  const bool root = me == rootRank;

  // 1. Every peer has reached call e-1 (so it is done with this call's half), for blocks that write.
  if (ep.epoch > 1 && (!root || blockIdx.x == 0)) {
    if (threadIdx.x < static_cast<uint32_t>(n - 1)) {
      const int p = device::peerAt(v, static_cast<int>(threadIdx.x));
      ctx.peer = p;
      ok = awaitToken(reg.token(me, ep.half ^ 1u, p), ep.epoch - 1, ctx);
    }
    ok = __syncthreads_and(ok) != 0;
  }
  // 2. This rank's token of call e to every peer.
  if (ok && blockIdx.x == 0 && threadIdx.x < static_cast<uint32_t>(n - 1)) {
    const int p = device::peerAt(v, static_cast<int>(threadIdx.x));
    device::storeRelaxedSys(reg.token(p, ep.half, me), ep.epoch);
  }

  // 3. Data.
  if (ok && !root) {
    // The run into slot `me` of the root, all stores in flight, then its flags.
    char* dst = reg.slot(rootRank, me);
    const uint32_t inAlign = alignClass(a.input);
    for (uint64_t q0 = run.begin * kChunkPacks + lane; q0 < q1; q0 += 32 * kStoreUnroll) {
      uint4 x[kStoreUnroll];
#pragma unroll
      for (int u = 0; u < kStoreUnroll; ++u) {
        const uint64_t q = q0 + 32u * u;
        x[u] = q < q1 ? red.prescale(loadPack(a.input, q, a.bytes, inAlign)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kStoreUnroll; ++u) {
        const uint64_t q = q0 + 32u * u;
        if (q < q1) reinterpret_cast<uint4*>(dst)[q] = x[u];
      }
    }
    __syncwarp();
    for (uint64_t k = run.begin + lane; k < run.end; k += 32)
      device::storeReleaseSys(reg.flag(rootRank, me, k), ep.epoch);
  } else if (root) {
    // Every non-root's flags of the run (lane-strided over (chunk, peer) pairs), then the reduction.
    const uint64_t pairs = (run.end - run.begin) * static_cast<uint64_t>(n - 1);
    for (uint64_t i = lane; ok && i < pairs; i += 32) {
      const int p = device::peerAt(v, static_cast<int>(i % (n - 1)));
      ctx.peer = p;
      ok = awaitFlag(reg.flag(me, p, run.begin + i / (n - 1)), ep.epoch, ctx);
    }
    ok = __all_sync(0xffffffffu, ok);
    __syncwarp();
    const uint32_t inAlign = alignClass(a.input), outAlign = alignClass(a.output);
    for (uint64_t q = run.begin * kChunkPacks + lane; ok && q < q1; q += 32) {
      uint4 vals[kMaxRanks];
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r) {
        vals[r] = make_uint4(0, 0, 0, 0);
        if (r < n && r != me) vals[r] = reinterpret_cast<const uint4*>(reg.slot(me, r))[q];
      }
      const uint4 own = loadPack(a.input, q, a.bytes, inAlign);
      storePack(a.output, q, a.bytes, outAlign, reduceRankOrder(red, vals, own, me, n));
    }
  }

  __syncthreads();
  finishLLEpoch(a.epoch, ep);
}

class ReduceDirect : public ReductionAlgorithm {
 public:
  static constexpr uint64_t kMaxBytes = 1 << 20;     // the largest message it is built for
  static constexpr double kBudgetFraction = 0.0625;  // of the packet buffer
  static constexpr uint64_t kPacksPerBlock = 512;    // default: one chunk per warp of 16
  static constexpr int kMaxBlocksCap = 128;
  static_assert(kMaxBlocksCap <= static_cast<int>(kLLEpochWords), "a block's epoch word must exist");

  ReduceDirect() : ReductionAlgorithm("reduce_direct", Collective::Reduce) {}

  void initialize(CommResources& resources) override {
    recordResources(resources);
    // Per source and half: slotBytes of data, one token and slotBytes / kChunkBytes flags of 8 bytes.
    const uint64_t perSlotBudget =
        static_cast<uint64_t>(static_cast<double>(packetBytes_) * kBudgetFraction) / (2ull * nRanks_);
    const uint64_t fit = (perSlotBudget - sizeof(uint64_t)) * kChunkBytes / (kChunkBytes + sizeof(uint64_t));
    const uint64_t slot = std::min<uint64_t>(kMaxBytes, fit / kChunkBytes * kChunkBytes);
    const uint64_t perSlot = slot + sizeof(uint64_t) + slot / kChunkBytes * sizeof(uint64_t);
    region_.reserve(resources, slot, 2ull * nRanks_ * perSlot);
  }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = commonReason(args, topo);
    if (!r.empty()) return r;
    const uint64_t bytes = args.count * dataTypeSize(args.dtype);
    if (bytes > region_.slotBytes) {
      return detail::concat("message of ", bytes, " bytes exceeds the region (", region_.slotBytes,
                            " bytes per rank; MESHCOMM_PACKET_BYTES=", packetBytes_, ")");
    }
    return {};
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    return blocksForPacks(packsOf(args.count * dataTypeSize(args.dtype)), kPacksPerBlock, maxBlocks(topo),
                          kDirectThreads);
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    if (args.count == 0) return;
    const CommTopology& topo = resources.topology();
    const LaunchConfig c = resolveConfig(config, defaultConfig(args, topo), maxBlocks(topo));
    const RegionCallArgs a = regionCallArgs(resources, args, region_);
    dispatch(args, [&](auto tag) {
      using Tag = decltype(tag);
      reduceDirectKernel<Tag::kType, Tag::kOp>
          <<<c.nBlocks, c.nThreadsPerBlock, 0, args.stream>>>(a, args.root);
    });
  }

 private:
  static int maxBlocks(const CommTopology& topo) { return std::min(kMaxBlocksCap, smCountOf(topo)); }

  ReductionRegion region_;
};

}  // namespace

std::shared_ptr<Algorithm> makeReduceDirect() {
  return std::make_shared<ReduceDirect>();
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
