// The LL exchange engine shared by allgather_ll and alltoall_ll (movement_common.cuh describes it).
#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {

__global__ void __launch_bounds__(kLLThreads)
    llExchangeKernel(CommDeviceView v, PacketRegion r, PairEpochs ep, int blocksPerPeer, const char* input,
                     char* output, uint64_t bytes, uint64_t srcStride, uint64_t dstStride) {
  const BlockRole role = blockRole(v, blocksPerPeer);
  uint64_t epoch = 0, off = 0, len = 0, pk0 = 0;
  if (role.peer >= 0) {
    // This block's packets of the pair: packets [pk0, pk1) = payload bytes [off, off + len).
    epoch = ep.load(role.peer, role.c);
    const uint64_t nPackets = divUp(bytes, LL16Packet::kPayloadBytes);
    const uint64_t per = divUp(nPackets, static_cast<uint64_t>(blocksPerPeer));
    pk0 = per * static_cast<uint64_t>(role.c);
    const uint64_t pk1 = minU(nPackets, pk0 + per);
    if (pk0 < pk1) {
      off = pk0 * LL16Packet::kPayloadBytes;
      len = minU(bytes, pk1 * LL16Packet::kPayloadBytes) - off;
      auto* dst = reinterpret_cast<LL16Packet*>(r.outbox(v, role.peer, epoch & 1)) + pk0;
      device::putPackets(dst, input + static_cast<uint64_t>(role.peer) * srcStride + off, len, llFlag(epoch),
                         threadIdx.x, blockDim.x);
    }
  }
  // Local chunk (skipped in place), spread over all blocks while the packets travel.
  copyShare(output + static_cast<uint64_t>(v.rank) * dstStride,
            input + static_cast<uint64_t>(v.rank) * srcStride, bytes, blockIdx.x, gridDim.x, threadIdx.x,
            blockDim.x);
  if (role.peer < 0) return;
  __syncthreads();  // in place: this block's input share is read before its output share is written
  if (len) {
    const auto* src = reinterpret_cast<const LL16Packet*>(r.inbox(v, role.peer, epoch & 1)) + pk0;
    // A false return (timeout / abort) is recorded by getPackets; the block just finishes.
    device::getPackets(output + static_cast<uint64_t>(role.peer) * dstStride + off, src, len, llFlag(epoch),
                       threadIdx.x, blockDim.x, device::channelRef(v, role.peer, 0).semaphore.spin);
  }
  __syncthreads();  // every packet read of this block is done before the epoch moves on
  ep.advance(role.peer, role.c, blocksPerPeer, epoch, threadIdx.x, blockDim.x);
}

void LLExchangeAlgorithm::launch(CommResources& resources, const CollectiveArgs& args,
                                 const LaunchConfig& config, void* context) {
  const CommDeviceView& v = resources.view();
  const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
  if (bytes == 0) return;  // equal on every rank; an LL call must carry at least one packet per pair
  requireFitsLLSlot(v, name_, bytes, maxBytesPerPeer_);
  const int threads = normalizeThreads(config.nThreadsPerBlock, kLLThreads, 32, kLLThreads);
  const LLGrid g = llGrid(config, v.nRanks, llBlocksPerPeer(bytes, threads, resources.topology()));
  llExchangeKernel<<<g.blocks, threads, 0, args.stream>>>(
      v, region_, epochs_, g.blocksPerPeer, static_cast<const char*>(args.input),
      static_cast<char*>(args.output), bytes, srcStrided_ ? bytes : 0, bytes);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::movement
