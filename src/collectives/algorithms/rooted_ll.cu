// broadcast_ll, gather_ll, scatter_ll: the LL exchange restricted to the pairs that include the root
// (small messages). The *data sender* of a pair (broadcast, scatter: the root; gather: the non-root)
// writes its payload for the peer as LL16 packets into the peer's region, slot [sender]; the other side
// writes one *ack* packet (payload 0) into the data sender's region, slot [its rank], at the start of its
// kernel, and the data sender spins for it (block c = 0, thread 0) before its epoch moves on. The ack makes
// the pair's traffic two-way, which is what the pair-epoch half-safety argument (movement_common.cuh,
// PairEpochs) needs: a sender writes half h in pair-epoch e+2 only after its kernel of epoch e+1 read the
// peer's epoch-(e+1) packet, which the peer wrote after its kernel of epoch e (the last reader of half h)
// completed. Pairs without the root are idle (no packets, epochs untouched: both sides agree, the root is
// an argument equal on all ranks). Root-local copy: broadcast input -> output, gather input -> output +
// root*bytes, scatter input + root*bytes -> output (each skipped in place).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

enum class RootedMode : int { Broadcast, Gather, Scatter };

constexpr uint64_t kRootedLLBudgets[] = {1u << 20, 512u << 10, 256u << 10};

struct PacketShare {
  uint64_t pk0, off, len;  // packets [pk0, ...) = payload bytes [off, off + len)
};

__device__ PacketShare packetShare(uint64_t bytes, int B, int c) {
  const uint64_t nPackets = divUp(bytes, LL16Packet::kPayloadBytes);
  const uint64_t per = divUp(nPackets, static_cast<uint64_t>(B));
  const uint64_t pk0 = per * static_cast<uint64_t>(c);
  const uint64_t pk1 = minU(nPackets, pk0 + per);
  if (pk0 >= pk1) return {pk0, 0, 0};
  const uint64_t off = pk0 * LL16Packet::kPayloadBytes;
  return {pk0, off, minU(bytes, pk1 * LL16Packet::kPayloadBytes) - off};
}

__global__ void __launch_bounds__(kLLThreads)
    llRootedKernel(CommDeviceView v, PacketRegion r, PairEpochs ep, int B, const char* input, char* output,
                   uint64_t bytes, int root, RootedMode mode) {
  __shared__ uint64_t sAck;
  const BlockRole role = blockRole(v, B);
  const bool active = role.peer >= 0 && (v.rank == root || role.peer == root);
  const bool dataSender = mode == RootedMode::Gather ? v.rank != root : v.rank == root;
  uint64_t epoch = 0;
  uint32_t flag = 0;
  if (active) {
    epoch = ep.load(role.peer, role.c);
    flag = llPacketFlag(epoch);
    auto* out = reinterpret_cast<LL16Packet*>(r.outbox(v, role.peer, epoch & 1));
    if (dataSender) {
      const char* src = input + (mode == RootedMode::Scatter ? static_cast<uint64_t>(role.peer) * bytes : 0);
      const PacketShare s = packetShare(bytes, B, role.c);
      if (s.len) device::putPackets(out + s.pk0, src + s.off, s.len, flag, threadIdx.x, blockDim.x);
    } else if (role.c == 0 && threadIdx.x == 0) {
      out[0].write(0u, 0u, flag);  // ack: this call has started here (earlier reads of the half are done)
    }
  }
  if (v.rank == root) {
    const uint64_t rootOff = static_cast<uint64_t>(root) * bytes;
    if (mode == RootedMode::Broadcast)
      copyShare(output, input, bytes, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
    if (mode == RootedMode::Gather)
      copyShare(output + rootOff, input, bytes, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
    if (mode == RootedMode::Scatter)
      copyShare(output, input + rootOff, bytes, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
  }
  if (!active) return;
  __syncthreads();
  const auto* in = reinterpret_cast<const LL16Packet*>(r.inbox(v, role.peer, epoch & 1));
  const SpinContext ctx = device::channelRef(v, role.peer, 0).semaphore.spin;
  // A false return (timeout / abort) is recorded by getPackets; the block just finishes.
  if (dataSender) {
    if (role.c == 0 && threadIdx.x == 0)
      device::getPackets(&sAck, in, LL16Packet::kPayloadBytes, flag, 0, 1, ctx);
  } else {
    char* dst = output + (mode == RootedMode::Gather ? static_cast<uint64_t>(role.peer) * bytes : 0);
    const PacketShare s = packetShare(bytes, B, role.c);
    if (s.len) device::getPackets(dst + s.off, in + s.pk0, s.len, flag, threadIdx.x, blockDim.x, ctx);
  }
  __syncthreads();  // every packet read of this block is done before the epoch moves on
  ep.advance(role.peer, role.c, B, epoch, threadIdx.x, blockDim.x);
}

class RootedLL : public Algorithm {
 public:
  RootedLL(std::string name, Collective collective, RootedMode mode)
      : name_(std::move(name)), collective_(collective), mode_(mode) {}
  std::string name() const override { return name_; }
  Collective collective() const override { return collective_; }

  void initialize(CommResources& resources) override {
    LLRegionState st = reserveLLRegion(resources, kRootedLLBudgets);
    region_ = st.region;
    epochs_ = st.epochs;
    maxBytesPerPeer_ = st.maxBytesPerPeer;
  }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return llUnsupportedReason(args, topo, maxBytesPerPeer_);
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
    return {llBlocksPerPeer(bytes, kLLThreads, topo) * std::max(1, topo.nRanks - 1), kLLThreads};
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
    if (bytes == 0) return;  // equal on every rank; every active pair must carry >= 1 packet each way
    requireFitsLLSlot(v, name_, bytes, maxBytesPerPeer_);
    const int threads = normalizeThreads(config.nThreadsPerBlock, kLLThreads, 32, kLLThreads);
    const LLGrid g = llGrid(config, v.nRanks, llBlocksPerPeer(bytes, threads, resources.topology()));
    llRootedKernel<<<g.blocks, threads, 0, args.stream>>>(
        v, region_, epochs_, g.blocksPerPeer, static_cast<const char*>(args.input),
        static_cast<char*>(args.output), bytes, args.root, mode_);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }

 private:
  std::string name_;
  Collective collective_;
  RootedMode mode_;
  PacketRegion region_;
  PairEpochs epochs_;
  uint64_t maxBytesPerPeer_ = 0;
};

}  // namespace

std::shared_ptr<Algorithm> makeBroadcastLL() {
  return std::make_shared<RootedLL>("broadcast_ll", Collective::Broadcast, RootedMode::Broadcast);
}
std::shared_ptr<Algorithm> makeGatherLL() {
  return std::make_shared<RootedLL>("gather_ll", Collective::Gather, RootedMode::Gather);
}
std::shared_ptr<Algorithm> makeScatterLL() {
  return std::make_shared<RootedLL>("scatter_ll", Collective::Scatter, RootedMode::Scatter);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
