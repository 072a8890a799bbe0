// The plan executor's prologue for plans that write into (or read from) the peers' input or output: every
// rank tells every peer where its call buffers lie in the buffers registered with Comm::registerBuffer
// (registration index and offset; they differ per rank), and resolves the peers' in its own registry table
// into PlanLaunch::peerBuffers. One block of 32 threads; thread i serves the i-th peer.
//
// Memory order: thread i stores this rank's descriptor into peer p's slot, then signals channel (p, 0)
// (release: the descriptor); it waits on channel (p, 0) (acquire) before reading p's descriptor in its own
// slot. Slots alternate by the prologue's epoch parity: a peer writes slot parity k%2 again in call k+2 after
// its call k+1 waited for this rank's call k+1 signal, which follows this rank's read of call k.
#include "collectives/algorithms/reduction_common.cuh"
#include "meshcomm/device/comm_device.hpp"
#include "plan/plan_peer_buffers.hpp"

namespace meshcomm::plan {
namespace {

MESHCOMM_DEVICE_INLINE char* registeredAt(const RegistryDeviceView& r, int n, int owner, int32_t index,
                                          uint64_t offset, uint64_t bytes) {
  if (index < 0 || index >= r.maxEntries) return nullptr;
  const uint64_t k = static_cast<uint64_t>(index) * static_cast<uint64_t>(n) + static_cast<uint64_t>(owner);
  char* base = static_cast<char*>(r.bases[k]);
  const uint64_t size = r.sizes[k];
  if (base == nullptr || offset > size || bytes > size - offset) return nullptr;
  return base + offset;
}

__global__ void exchangePeerBuffersKernel(PeerBufferExchange x) {
  const CommDeviceView& v = x.view;
  const int n = v.nRanks, me = v.rank, i = threadIdx.x;
  const reduction::LLEpoch ep = reduction::beginLLEpoch(x.epoch);
  auto slot = [&](int at, int from) {
    return reinterpret_cast<CallBufferDescriptor*>(static_cast<char*>(v.peerPackets[at]) + x.slotsOffset +
                                                   (static_cast<uint64_t>(ep.half) * n + from) *
                                                       kDescriptorSlotBytes);
  };
  if (i < n - 1) {
    const int p = device::peerAt(v, i);
    *slot(p, me) = x.mine;
    device::channelRef(v, p, 0).signal();
    auto& ch = device::channelRef(v, p, 0);
    char* in = nullptr;
    char* out = nullptr;
    if (ch.wait()) {
      const CallBufferDescriptor d = *slot(me, p);
      in = registeredAt(x.registry, n, p, d.inIndex, d.inOffset, d.inBytes);
      out = registeredAt(x.registry, n, p, d.outIndex, d.outOffset, d.outBytes);
      if (d.inBytes != x.mine.inBytes || d.outBytes != x.mine.outBytes || in == nullptr || out == nullptr) {
        SpinContext ctx = ch.semaphore.spin;
        ctx.peer = p;
        device::reportTimeout(ctx, DeviceOp::CountMismatch, x.mine.inBytes, d.inBytes, 0);
        in = out = nullptr;
      }
    }
    x.peerBuffers[static_cast<int>(BufferKind::Input) * n + p] = in;
    x.peerBuffers[static_cast<int>(BufferKind::Output) * n + p] = out;
  }
  __syncthreads();
  if (i == 0) reduction::finishLLEpoch(x.epoch, ep);
}

}  // namespace

void exchangePeerBuffers(const PeerBufferExchange& x, cudaStream_t stream) {
  exchangePeerBuffersKernel<<<1, 32, 0, stream>>>(x);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::plan
