// The plan executor's prologue, run at the start of the executor kernel (plan_executor.cu) for plans that
// write into (or read from) the peers' input or output: every rank tells every peer where its call buffers
// lie in the buffers registered with Comm::registerBuffer (registration index and offset; they differ per
// rank), and resolves the peers' in its own registry table into PeerBufferExchange::peerBuffers. Plans that
// only write into the peers' scratch run it without descriptors: its signal/wait round is the entry barrier
// that orders their writes after each peer's previous use of its scratch (native or plan). Warp 0 of block 0
// runs the exchange (lane t serves peers t, t + 32, ...); the other blocks wait for block 0's `done` store.
//
// Memory order. Lane i stores this rank's descriptor into peer p's slot, then signals channel (p, 0)
// (release: the descriptor); it waits on channel (p, 0) (acquire) before reading p's descriptor in its own
// slot. Slots alternate by the launch epoch's parity: a peer writes slot parity k%2 again in call k+2 after
// its call k+1 waited for this rank's call k+1 signal, which follows this rank's read of call k. Block 0's
// __syncthreads() orders the lanes' peerBuffers stores before thread 0's system-scope release of `done` (the
// launch's epoch); every other block's thread 0 acquires it, then __syncthreads(), before any thread reads
// peerBuffers.
#pragma once

#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/device_error.hpp"
#include "plan/plan_peer_buffers.hpp"

namespace meshcomm::plan {

// Warp 0 of block 0: the descriptors' exchange (or the entry barrier alone) with every peer.
MESHCOMM_DEVICE_INLINE void exchangePeerBuffers(const CommDeviceView& v, const PeerBufferExchange& x,
                                                uint32_t half) {
  const int n = v.nRanks, me = v.rank;
  auto slot = [&](int at, int from) {
    return reinterpret_cast<CallBufferDescriptor*>(static_cast<char*>(v.peerPackets[at]) + x.slotsOffset +
                                                   (static_cast<uint64_t>(half) * n + from) *
                                                       kDescriptorSlotBytes);
  };
  // Every peer gets this rank's descriptor and a signal before any lane waits (a lane may serve several).
  for (int i = threadIdx.x; i < n - 1; i += 32) {
    const int p = device::peerAt(v, i);
    if (x.exchange) *slot(p, me) = x.mine;
    device::channelRef(v, p, 0).signal();
  }
  for (int i = threadIdx.x; i < n - 1; i += 32) {
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
        // (every later wait gives up; the host raises it); no data moves (ops on a null buffer stop).
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
}

// Every thread of every block, before the first op: block 0 runs the exchange and publishes `launchEpoch`
// in x.done; the other blocks wait for it. False (no op runs) when the wait timed out or the communicator
// aborted, or when this rank's own call buffers are not registered (the exchange still runs, so the peers
// fail this call in step; the host raises the error).
MESHCOMM_DEVICE_INLINE bool runPrologue(const CommDeviceView& v, const PeerBufferExchange& x,
                                        uint64_t launchEpoch, uint32_t half, const SpinContext& ctx) {
  __shared__ int ok;
  const bool usable = !x.exchange || (x.mine.inIndex >= 0 && x.mine.outIndex >= 0);
  if (blockIdx.x == 0) {
    if (threadIdx.x < 32) exchangePeerBuffers(v, x, half);
    __syncthreads();
    if (threadIdx.x == 0) device::storeReleaseSys(x.done, launchEpoch);
    return usable;
  }
  if (threadIdx.x == 0) {
    ok = device::spinUntil(
             [&](uint64_t& seen) {
               seen = device::loadAcquireSys(x.done);
               return seen == launchEpoch;
             },
             ctx, DeviceOp::SemaphoreWait, launchEpoch)
             ? 1
             : 0;
  }
  __syncthreads();
  return usable && ok != 0;
}

}  // namespace meshcomm::plan
