// The plan executor's prologue for plans that write into (or read from) the peers' input or output: every
// rank tells every peer where its call buffers lie in the buffers registered with Comm::registerBuffer
// (registration index and offset; they differ per rank), and resolves the peers' in its own registry table
// into PlanLaunch::peerBuffers. Plans that only write into the peers' scratch run the same kernel without
// descriptors: its signal/wait round is the entry barrier that orders their writes after each peer's previous
// use of its scratch (native or plan). One block of 32 threads; thread t serves peers t, t + 32, ...
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

__global__ void exchangePeerBuffersKernel(PeerBufferExchange x) {
  const CommDeviceView& v = x.view;
  const int n = v.nRanks, me = v.rank;
  const reduction::LLEpoch ep = reduction::beginLLEpoch(x.epoch);
  auto slot = [&](int at, int from) {
    return reinterpret_cast<CallBufferDescriptor*>(static_cast<char*>(v.peerPackets[at]) + x.slotsOffset +
                                                   (static_cast<uint64_t>(ep.half) * n + from) *
                                                       kDescriptorSlotBytes);
  };
  // Every peer gets this rank's descriptor and a signal before any thread waits (a thread may serve several).
  for (int i = threadIdx.x; i < n - 1; i += blockDim.x) {
    const int p = device::peerAt(v, i);
    if (x.exchange) *slot(p, me) = x.mine;
    device::channelRef(v, p, 0).signal();
  }
  for (int i = threadIdx.x; i < n - 1; i += blockDim.x) {
    const int p = device::peerAt(v, i);
    auto& ch = device::channelRef(v, p, 0);
    const bool arrived = ch.wait();
    if (!x.exchange) continue;
    char* in = nullptr;
    char* out = nullptr;
    if (arrived) {
      const CallBufferDescriptor d = *slot(me, p);
      in = registeredAt(x.registry, n, p, d.inIndex, d.inOffset, d.inBytes);
      out = registeredAt(x.registry, n, p, d.outIndex, d.outOffset, d.outBytes);
      const bool sameCall = d.inBytes == x.mine.inBytes && d.outBytes == x.mine.outBytes;
      if (!sameCall || in == nullptr || out == nullptr) {
        // Another size, or a peer (or this rank) whose buffers are not registered: fatal for the communicator
        // (every later wait gives up; the host raises it); no data moves.
        SpinContext ctx = ch.semaphore.spin;
        ctx.peer = p;
        device::reportTimeout(ctx, DeviceOp::CountMismatch, sameCall ? x.mine.inIndex : x.mine.inBytes,
                              sameCall ? d.inIndex : d.inBytes, 0);
        in = out = nullptr;
      }
    }
    x.peerBuffers[static_cast<int>(BufferKind::Input) * n + p] = in;
    x.peerBuffers[static_cast<int>(BufferKind::Output) * n + p] = out;
  }
  __syncthreads();
  if (threadIdx.x == 0) reduction::finishLLEpoch(x.epoch, ep);
}

}  // namespace

void exchangePeerBuffers(const PeerBufferExchange& x, cudaStream_t stream) {
  exchangePeerBuffersKernel<<<1, 32, 0, stream>>>(x);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::plan
