// allreduce_zerocopy: allreduce on registered buffers (Comm::registerBuffer) with no staging copy. Two-shot
// over NVLink loads and stores: rank r owns segment r (Layout::Split) and, for every pack of it, loads the
// pack from every rank's input (peers' inputs through their registered mappings), reduces in rank order
// and stores the result into every rank's output. Per block c (channel c with every peer):
//   arrival:  thread i writes this rank's descriptor {input/output registration + offset, bytes} into peer
//             i's descriptor slot [c][me], then signals it (release: the descriptor; by stream order this
//             rank's input is complete since its kernel started); waits for every peer's signal (acquire)
//             and resolves the peer's input/output pointers in its own registry table
//   data:     the block's packs of the own segment: loads from n inputs, rank-order reduction, n stores
//   finish:   __syncthreads, signal every peer, wait for every peer (release/acquire): afterwards every
//             peer has finished reading this rank's input and writing this rank's output
// Signals per (peer, channel) and call: 2, waited for 2 (invariant 1). Descriptor slot reuse: a peer writes
// slot [c][p] of call k+1 after its call k ended, which needed this rank's finish signal of call k, sent
// after this rank read the slot. In place is safe: the thread that reads pack q of every input is the only
// one that writes pack q of every output, after its loads. PreMulSum is declined (each rank's scalar scales
// its own input and a reader here does not have the peers' scalars); allreduce_rsag runs it.
// docs/collectives.md, "Registered buffers and zero-copy".
#include <algorithm>
#include <cstdint>
#include <string>

#include "collectives/algorithms/reduction_common.cuh"
#include "meshcomm/buffer_registry.hpp"
#include "base/kernel_modules.hpp"

namespace meshcomm::reduction {
namespace {

// What a rank tells every peer at the start of a call.
struct ZeroCopyDescriptor {
  int32_t inIndex;
  int32_t outIndex;
  uint64_t inOffset;
  uint64_t outOffset;
  uint64_t bytes;
};
constexpr uint64_t kDescriptorSlot = 64;  // bytes per (block, source) slot
constexpr int kMaxZeroCopyBlocks = 128;   // descriptor area: [block][source rank] slots
constexpr int kZeroCopyUnroll = 2;        // packs per thread per step: 2n independent loads in flight

struct ZeroCopyArgs {
  CommDeviceView view;
  RegistryDeviceView registry;
  const char* input;
  char* output;
  ZeroCopyDescriptor mine;
  uint64_t descOffset;  // of the descriptor area in every rank's packet buffer
  ReduceParams red;
};

template <DataType D, ReduceOp Op>
__global__ void __launch_bounds__(kMaxThreads) zeroCopyAllReduceKernel(ZeroCopyArgs a) {
  const CommDeviceView& v = a.view;
  const int n = v.nRanks, me = v.rank, c = blockIdx.x, i = threadIdx.x;
  __shared__ const char* srcs[kMaxRanks];
  __shared__ char* dsts[kMaxRanks];
  auto slot = [&](int at, int from) {
    return reinterpret_cast<ZeroCopyDescriptor*>(static_cast<char*>(v.peerPackets[at]) + a.descOffset +
                                                 (static_cast<uint64_t>(c) * n + from) * kDescriptorSlot);
  };
  // Arrival.
  if (i < n - 1) {
    const int p = device::peerAt(v, i);
    *slot(p, me) = a.mine;
    device::channelRef(v, p, c).signal();
  }
  if (i == 0) {
    srcs[me] = a.input;
    dsts[me] = a.output;
  }
  int ok = 1;
  if (i < n - 1) {
    const int p = device::peerAt(v, i);
    auto& ch = device::channelRef(v, p, c);
    ok = ch.wait() ? 1 : 0;
    if (ok) {
      const ZeroCopyDescriptor d = *slot(me, p);
      srcs[p] = registeredAt(a.registry, n, p, d.inIndex, d.inOffset, d.bytes);
      dsts[p] = registeredAt(a.registry, n, p, d.outIndex, d.outOffset, d.bytes);
      if (d.bytes != a.mine.bytes || srcs[p] == nullptr || dsts[p] == nullptr) {
        // Counts differ, or the peer named a registration this rank does not have: fatal for the
        // communicator (every wait gives up; the host raises it). No data is touched.
        SpinContext ctx = ch.semaphore.spin;
        ctx.peer = p;
        device::reportTimeout(ctx, DeviceOp::CountMismatch, a.mine.bytes, d.bytes, 0);
        ok = 0;
      }
    }
  }
  if (!__syncthreads_and(ok)) return;

  // Data: this rank's segment, the block's share of its packs.
  const Segments<Layout::Split> seg(n, a.mine.bytes);
  const uint64_t start = seg.start(me), segBytes = seg.length(me);
  const BlockRange range(seg.packs(me), blockIdx.x, gridDim.x);
  const char* in[kMaxRanks];
  char* out[kMaxRanks];
  uint32_t inAlign[kMaxRanks], outAlign[kMaxRanks];
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r) {
    in[r] = r < n ? srcs[r] + start : nullptr;
    out[r] = r < n ? dsts[r] + start : nullptr;
    inAlign[r] = alignClass(in[r]);
    outAlign[r] = alignClass(out[r]);
  }
  const device::Reducer<D, Op> red(a.red);
  const uint64_t first = range.begin, end = range.end;
  for (uint64_t q0 = first + threadIdx.x; q0 < end; q0 += kZeroCopyUnroll * blockDim.x) {
    uint4 vals[kZeroCopyUnroll][kMaxRanks];
#pragma unroll
    for (int u = 0; u < kZeroCopyUnroll; ++u) {
      const uint64_t q = q0 + static_cast<uint64_t>(u) * blockDim.x;
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r) {
        vals[u][r] = (q < end && r < n) ? loadPack(in[r], q, segBytes, inAlign[r]) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kZeroCopyUnroll; ++u) {
      const uint64_t q = q0 + static_cast<uint64_t>(u) * blockDim.x;
      if (q >= end) break;
      // No premulsum here, so every rank's raw input is already "prescaled".
      const uint4 res = reduceRankOrder(red, vals[u], vals[u][me], me, n);
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r)
        if (r < n) storePack(out[r], q, segBytes, outAlign[r], res);
    }
  }

  // Finish.
  __syncthreads();
  device::signalAllPeers(v, c);
  device::waitAllPeers(v, c);
}

class AllreduceZeroCopy : public ReductionAlgorithm {
 public:
  static constexpr int kDefaultThreads = 512;
  static constexpr uint64_t kMinPacksPerBlock = 1024;  // 16 KiB of the own segment per block

  AllreduceZeroCopy() : ReductionAlgorithm("allreduce_zerocopy", Collective::AllReduce) {}

  void initialize(CommResources& resources) override {
    recordResources(resources);
    descOffset_ =
        resources.reservePacketRegion(static_cast<size_t>(kMaxZeroCopyBlocks) * kMaxRanks * kDescriptorSlot);
  }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = commonReason(args, topo);
    if (!r.empty()) return r;
    if (args.op.op == ReduceOp::PreMulSum) {
      return "premulsum scales each rank's input by that rank's own scalar, which a zero-copy reader does "
             "not have";
    }
    if (!args.inputSpan.registered()) return "the input is not inside a registered buffer (registerBuffer)";
    if (!args.outputSpan.registered()) return "the output is not inside a registered buffer (registerBuffer)";
    if (topo.nRanks > 1 && channelsPerPeer_ < 1) return "needs at least one channel per peer";
    return {};
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    const uint64_t packs =
        Segments<Layout::Split>(topo.nRanks, args.count * dataTypeSize(args.dtype)).maxPacks();
    return blocksForPacks(packs, kMinPacksPerBlock, maxBlocks(topo), kDefaultThreads);
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    if (args.count == 0) return;
    const CommTopology& topo = resources.topology();
    const LaunchConfig c = resolveConfig(config, defaultConfig(args, topo), maxBlocks(topo));
    ZeroCopyArgs a;
    a.view = resources.view();
    a.registry = resources.registry().deviceView();
    a.input = static_cast<const char*>(args.input);
    a.output = static_cast<char*>(args.output);
    a.mine = ZeroCopyDescriptor{args.inputSpan.index, args.outputSpan.index, args.inputSpan.offset,
                                args.outputSpan.offset, args.count * dataTypeSize(args.dtype)};
    a.descOffset = descOffset_;
    a.red = makeReduceParams(args.op, topo.nRanks);
    dispatch(args, [&](auto tag) {
      using Tag = decltype(tag);
      if constexpr (Tag::kOp != ReduceOp::PreMulSum) {
        zeroCopyAllReduceKernel<Tag::kType, Tag::kOp><<<c.nBlocks, c.nThreadsPerBlock, 0, args.stream>>>(a);
      } else {
        MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank_,
                       ": allreduce_zerocopy: premulsum is not supported");
      }
    });
  }

 private:
  int maxBlocks(const CommTopology& topo) const {
    int m = std::min(kMaxZeroCopyBlocks, smCountOf(topo));
    if (topo.nRanks > 1) m = std::min(m, channelsPerPeer_);
    return std::max(1, m);
  }

  size_t descOffset_ = 0;
};

}  // namespace

std::shared_ptr<Algorithm> makeAllreduceZeroCopy() {
  return std::make_shared<AllreduceZeroCopy>();
}

}  // namespace meshcomm::reduction

MESHCOMM_KERNEL_MODULE()
