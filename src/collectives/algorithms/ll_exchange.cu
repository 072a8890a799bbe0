// The LL exchange engine shared by allgather_ll, alltoall_ll (movement_common.cuh describes it) and
// sendrecv_ll's even exchanges (the same kernel speaking the LL stream protocol, ll_stream.cu).
#include "collectives/algorithms/ll_stream.hpp"
#include "collectives/algorithms/movement_common.cuh"
#include "base/kernel_modules.hpp"

namespace meshcomm::movement {
namespace {

constexpr uint32_t kWarpThreads = 32;

// kStreamHeader: block c == 0 also writes the pair's header {bytes, signature of one operation of `bytes`}
// (writeHeader; its packets precede the payload's in the slot, thread 0 writes them after its payload
// packets), and one thread reads the peer's and reports a mismatch while the others wait for their packets:
// lane 0 of the block's last warp, kept for it when the block has a warp to spare (headerWarp), else the
// last thread before its own packets. On a mismatch in which the peer sends fewer packets than this rank
// expects, the waits for the missing ones end at the abort flag the report raises (nothing is written for
// them). Memory order as the LL exchange: LL packets only; epoch words after __syncthreads() once the
// block's packet reads are done, read by the next launch.
// The local chunk's copy (out of place) is spread over every block. A block's warps that neither receive a
// packet nor read the header copy its share after the barrier, while the others wait, so the copy's loads
// delay neither; a block without such a warp copies between its puts and the barrier.
// (2x H200, nccl-tests alltoall 1-256 KiB: the header written first and read by a thread of a
// copying warp cost 0.08-0.20 us a call against no header; written last and read by a warp of its own,
// 0.02-0.12.)
template <bool kStreamHeader>
__global__ void __launch_bounds__(kLLThreads)
    llExchangeKernel(CommDeviceView v, PacketRegion r, PairEpochs ep, int blocksPerPeer, const char* input,
                     char* output, uint64_t bytes, uint64_t srcStride, uint64_t dstStride,
                     uint64_t selfBytes) {
  constexpr uint64_t kHead = kStreamHeader ? kLLStreamHeaderPackets : 0;
  const BlockRole role = blockRole(v, blocksPerPeer);
  uint64_t epoch = 0, off = 0, len = 0, pk0 = 0, blockPackets = 0;
  if (role.peer >= 0) {
    // This block's packets of the pair: packets [pk0, pk1) = payload bytes [off, off + len).
    epoch = ep.load(role.peer, role.c);
    char* out = r.outbox(v, role.peer, epoch & 1);
    const uint64_t nPackets = divUp(bytes, LL16Packet::kPayloadBytes);
    const uint64_t per = divUp(nPackets, static_cast<uint64_t>(blocksPerPeer));
    pk0 = per * static_cast<uint64_t>(role.c);
    const uint64_t pk1 = minU(nPackets, pk0 + per);
    blockPackets = pk1 > pk0 ? pk1 - pk0 : 0;
    if (pk0 < pk1) {
      off = pk0 * LL16Packet::kPayloadBytes;
      len = minU(bytes, pk1 * LL16Packet::kPayloadBytes) - off;
      auto* dst = reinterpret_cast<LL16Packet*>(out) + kHead + pk0;
      device::putPackets(dst, input + static_cast<uint64_t>(role.peer) * srcStride + off, len,
                         llPacketFlag(epoch), threadIdx.x, blockDim.x);
    }
    if constexpr (kStreamHeader) {
      if (role.c == 0 && threadIdx.x == 0)
        writeHeader(out, bytes, mixSize(kSigSeed, bytes), llPacketFlag(epoch));
    }
  }
  // Local chunk (skipped in place): this block's share, copied now by every thread, or after the barrier by
  // the warps in [receivers, copyEnd) (copyLate); all three block-uniform.
  char* selfOut = output + static_cast<uint64_t>(v.rank) * dstStride;
  const char* selfIn = input + static_cast<uint64_t>(v.rank) * srcStride;
  const uint32_t receivers =
      static_cast<uint32_t>(divUp(blockPackets, uint64_t{kWarpThreads}) * kWarpThreads);
  const bool headerWarp = kStreamHeader && role.c == 0 && receivers + kWarpThreads <= blockDim.x;
  const uint32_t copyEnd = headerWarp ? blockDim.x - kWarpThreads : blockDim.x;
  const bool copyLate = role.peer >= 0 && receivers + kWarpThreads <= copyEnd;
  if (!copyLate) copyShare(selfOut, selfIn, selfBytes, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
  if (role.peer < 0) return;
  __syncthreads();  // in place: this block's input share is read before its output share is written
  const char* in = r.inbox(v, role.peer, epoch & 1);
  if constexpr (kStreamHeader) {
    if (role.c == 0 && threadIdx.x == (headerWarp ? copyEnd : blockDim.x - 1)) {
      const SpinContext& ctx = device::channelRef(v, role.peer, 0).semaphore.spin;
      uint64_t peerBytes = 0, peerSig = 0;
      if (readHeader(in, llPacketFlag(epoch), ctx, peerBytes, peerSig) &&
          (peerBytes != bytes || peerSig != mixSize(kSigSeed, bytes)))
        reportMismatch(ctx, role.peer, bytes, peerBytes);
    }
  }
  if (threadIdx.x >= copyEnd) {
    // the header warp (its lane 0 read the header above)
  } else if (copyLate && threadIdx.x >= receivers) {
    copyShare(selfOut, selfIn, selfBytes, blockIdx.x, gridDim.x, threadIdx.x - receivers,
              copyEnd - receivers);
  } else if (len) {
    const auto* src = reinterpret_cast<const LL16Packet*>(in) + kHead + pk0;
    // A false return (timeout / abort) is recorded by getPackets; the block just finishes.
    device::getPackets(output + static_cast<uint64_t>(role.peer) * dstStride + off, src, len,
                       llPacketFlag(epoch), threadIdx.x, copyLate ? receivers : copyEnd,
                       device::channelRef(v, role.peer, 0).semaphore.spin);
  }
  __syncthreads();  // every packet read of this block is done before the epoch moves on
  ep.advance(role.peer, role.c, blocksPerPeer, epoch, threadIdx.x, blockDim.x);
}

}  // namespace

void launchLLExchange(const CommDeviceView& v, const PacketRegion& r, const PairEpochs& ep,
                      const LLGrid& grid, int threads, const LLExchange& x, cudaStream_t stream) {
  auto kernel = x.streamHeader ? llExchangeKernel<true> : llExchangeKernel<false>;
  kernel<<<grid.blocks, threads, 0, stream>>>(v, r, ep, grid.blocksPerPeer, x.input, x.output, x.bytes,
                                              x.srcStride, x.dstStride, x.selfBytes);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void LLExchangeAlgorithm::launch(CommResources& resources, const CollectiveArgs& args,
                                 const LaunchConfig& config, void* context) {
  const CommDeviceView& v = resources.view();
  const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
  if (bytes == 0) return;  // equal on every rank; an LL call must carry at least one packet per pair
  requireFitsLLSlot(v, name_, bytes, maxBytesPerPeer_);
  const int threads = normalizeThreads(config.nThreadsPerBlock, kLLThreads, 32, kLLThreads);
  LLExchange x;
  x.input = static_cast<const char*>(args.input);
  x.output = static_cast<char*>(args.output);
  x.bytes = x.dstStride = x.selfBytes = bytes;
  x.srcStride = srcStrided_ ? bytes : 0;
  launchLLExchange(v, region_, epochs_,
                   llGrid(config, v.nRanks, llBlocksPerPeer(bytes, threads, resources.topology())), threads,
                   x, args.stream);
}

}  // namespace meshcomm::movement

MESHCOMM_KERNEL_MODULE()
