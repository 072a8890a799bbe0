// The plan executor kernel (docs/dsl.md, "The executor"): CUDA block b runs the ops of the rank's plan thread
// block b in order with the device primitives the native algorithms use — device::copy for copy/put/get, the
// channel semaphores for signal/wait, LL16 packs (writePackLL, gatherPacksLL) for packets, device::Reducer
// for reductions.
//
// Memory order. put/get/copy are weak stores. signal: __syncthreads() (every thread's stores of the block
// before it), then thread 0's release increment (relaxed variant: no data ordering). wait: thread 0's acquire
// wait, then __syncthreads() before any thread's later access. Packets carry data and flag in one store and
// are read by flag. barrier: __syncthreads(), thread 0's fenced atomic arrival on the occurrence's counter
// and its acquire spin until every member block of this launch has arrived, then __syncthreads().
#include "collectives/algorithms/reduction_common.cuh"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/copy.hpp"
#include "plan/device_plan.hpp"

namespace meshcomm::plan {
namespace {

using reduction::alignClass;
using reduction::kMaxThreads;
using reduction::loadPack;
using reduction::packsOf;
using reduction::storePack;

struct Span {
  char* ptr;
  uint64_t bytes;
};

// The element range of chunks [index, index + size) of an input/output buffer at `base` (chunk geometry).
MESHCOMM_DEVICE_INLINE Span dataSpan(const PlanLaunch& a, char* base, uint64_t index, uint64_t size) {
  const uint64_t u = a.chunksPerUnit, n = a.n, c = a.chunkElems;
  auto at = [&](uint64_t k, uint64_t j) { return (k / u) * n + min(j * c, n); };
  const uint64_t last = index + size - 1;
  const uint64_t begin = at(index, index % u), end = at(last, last % u + 1);
  return {base + begin * a.elemBytes, (end - begin) * a.elemBytes};
}

// Rank r's buffer `buffer` as mapped here (the own scratch too comes from the table); null where a peer's
// call buffer could not be resolved.
MESHCOMM_DEVICE_INLINE char* bufferOf(const PlanLaunch& a, int r, uint8_t buffer) {
  if (r == a.view.rank && buffer != static_cast<uint8_t>(BufferKind::Scratch)) return a.local[buffer];
  return a.peerBuffers[buffer * a.view.nRanks + r];
}

// A reference's bytes in rank r's memory (scratch: `size` slots of c elements).
MESHCOMM_DEVICE_INLINE Span spanOf(const PlanLaunch& a, int r, const RefRecord& ref) {
  char* base = bufferOf(a, r, ref.buffer);
  if (ref.buffer == static_cast<uint8_t>(BufferKind::Scratch)) {
    const uint64_t slot = a.chunkElems * a.elemBytes;
    return {base + ref.index * slot, ref.size * slot};
  }
  return dataSpan(a, base, ref.index, ref.size);
}

// Chunk i of a reference alone (packet ops go chunk by chunk: packet chunk i holds data chunk i).
MESHCOMM_DEVICE_INLINE RefRecord chunkOf(const RefRecord& ref, uint32_t i) {
  return RefRecord{ref.index + i, 1, ref.buffer};
}

// The packets of scratch chunk `index` of rank r (this launch's half).
MESHCOMM_DEVICE_INLINE LL16Packet* packetsOf(const PlanLaunch& a, int r, uint64_t index, uint32_t half) {
  return reinterpret_cast<LL16Packet*>(static_cast<char*>(a.view.peerPackets[r]) + a.packetOffset +
                                       half * a.packetHalfBytes + index * a.packetChunkBytes);
}

// The byte count of an op: that of its input/output references, else its scratch references'.
MESHCOMM_DEVICE_INLINE uint64_t opBytes(const Span* spans, const RefRecord* refs, int count) {
  uint64_t data = ~0ull, any = ~0ull;
  for (int i = 0; i < count; ++i) {
    any = min(any, spans[i].bytes);
    if (refs[i].buffer != static_cast<uint8_t>(BufferKind::Scratch)) data = min(data, spans[i].bytes);
  }
  return data != ~0ull ? data : any;
}

constexpr int kMaxOperands = 16;  // srcs + packets of one reduction (the loader's limit)

template <DataType D, ReduceOp Op>
struct Executor {
  const PlanLaunch& a;
  const device::Reducer<D, Op> red;
  reduction::LLEpoch ep;
  SpinContext ctx;

  MESHCOMM_DEVICE_INLINE bool waitOn(const OpRecord& op) {
    __shared__ int ok;
    if (threadIdx.x == 0) {
      auto& ch = a.view.channels[op.channel];
      ok = (op.relaxed ? ch.relaxedWait() : ch.wait()) ? 1 : 0;
    }
    __syncthreads();
    return ok != 0;
  }

  MESHCOMM_DEVICE_INLINE void signalOn(const OpRecord& op) {
    __syncthreads();
    if (threadIdx.x == 0) {
      auto& ch = a.view.channels[op.channel];
      if (op.relaxed) {
        ch.relaxedSignal();
      } else {
        ch.signal();
      }
    }
  }

  // copy, put, get; false when a peer's call buffer is unknown (the prologue reported it).
  MESHCOMM_DEVICE_INLINE bool move(const OpRecord& op, const RefRecord* refs) {
    const int me = a.view.rank;
    const int dstRank = op.kind == static_cast<uint8_t>(OpKind::Put) ? op.peer : me;
    const int srcRank = op.kind == static_cast<uint8_t>(OpKind::Get) ? op.peer : me;
    const Span s[2] = {spanOf(a, dstRank, refs[0]), spanOf(a, srcRank, refs[1])};
    if (s[0].ptr == nullptr || s[1].ptr == nullptr) return false;
    device::copy(s[0].ptr, s[1].ptr, opBytes(s, refs, 2), threadIdx.x, blockDim.x);
    return true;
  }

  // dst = operands[0] (op) operands[1] ... over `bytes`; operand k is data (spans) or packets (pk).
  MESHCOMM_DEVICE_INLINE bool reduceInto(const Span& dst, const Span* srcs, int numSrcs,
                                         LL16Packet* const* packets, int numPackets, uint64_t bytes) {
    bool ok = true;
    const uint32_t dstAlign = alignClass(dst.ptr);
    if (numSrcs + numPackets == 1) {  // one operand: its bytes as they are (no conversion through Acc)
      for (uint64_t j = threadIdx.x; j < packsOf(bytes); j += blockDim.x) {
        uint4 x;
        if (numSrcs == 1) {
          x = loadPack(srcs[0].ptr, j, bytes, alignClass(srcs[0].ptr));
        } else {
          const reduction::GatherPacksPoll got =
              reduction::gatherPacksLL(packets[0], 0, j, 1u, ep.flag, ctx, ok);
          if (!ok) return false;
          x = got.vals[0];
        }
        storePack(dst.ptr, j, bytes, dstAlign, x);
      }
      return ok;
    }
    for (uint64_t j = threadIdx.x; j < packsOf(bytes); j += blockDim.x) {
      typename device::Reducer<D, Op>::Accs acc;
      int k = 0;
      for (; k < numSrcs; ++k) {
        const uint4 x = loadPack(srcs[k].ptr, j, bytes, alignClass(srcs[k].ptr));
        if (k == 0) {
          red.firstPrescaled(acc, x);
        } else {
          red.accumulatePrescaled(acc, x);
        }
      }
      for (int p = 0; p < numPackets; ++p, ++k) {
        const reduction::GatherPacksPoll got =
            reduction::gatherPacksLL(packets[p], 0, j, 1u, ep.flag, ctx, ok);
        if (!ok) return false;
        if (k == 0) {
          red.firstPrescaled(acc, got.vals[0]);
        } else {
          red.accumulatePrescaled(acc, got.vals[0]);
        }
      }
      storePack(dst.ptr, j, bytes, dstAlign, red.finish(acc));
    }
    return ok;
  }

  MESHCOMM_DEVICE_INLINE bool reduce(const OpRecord& op, const RefRecord* refs) {
    const int me = a.view.rank;
    Span spans[kMaxOperands + 1];
    const int count = 1 + op.numSrcs;
    for (int i = 0; i < count; ++i) spans[i] = spanOf(a, me, refs[i]);
    return reduceInto(spans[0], spans + 1, op.numSrcs, nullptr, 0, opBytes(spans, refs, count));
  }

  // reduce_packets and unpack_packets, chunk by chunk: dst chunk i = srcs chunk i (op) packet chunks i.
  MESHCOMM_DEVICE_INLINE bool receivePackets(const OpRecord& op, const RefRecord* refs) {
    const int me = a.view.rank;
    const bool unpack = op.kind == static_cast<uint8_t>(OpKind::UnpackPackets);
    const int numSrcs = unpack ? 0 : op.numSrcs;
    const int numPackets = unpack ? 1 : op.numPackets;
    const RefRecord* packetRefs = refs + 1 + numSrcs;
    for (uint32_t i = 0; i < refs[0].size; ++i) {
      RefRecord chunk[kMaxOperands + 1];
      Span spans[kMaxOperands + 1];
      LL16Packet* packets[kMaxOperands];
      chunk[0] = chunkOf(refs[0], i);
      for (int k = 0; k < numSrcs; ++k) chunk[1 + k] = chunkOf(refs[1 + k], i);
      for (int k = 0; k <= numSrcs; ++k) spans[k] = spanOf(a, me, chunk[k]);
      for (int p = 0; p < numPackets; ++p) packets[p] = packetsOf(a, me, packetRefs[p].index + i, ep.half);
      // The packet chunks only bound the count (c elements); the data chunks decide it.
      const uint64_t bytes = opBytes(spans, chunk, 1 + numSrcs);
      if (!reduceInto(spans[0], spans + 1, numSrcs, packets, numPackets, bytes)) return false;
    }
    return true;
  }

  MESHCOMM_DEVICE_INLINE void putPackets(const OpRecord& op, const RefRecord* refs) {
    const int me = a.view.rank;
    for (uint32_t i = 0; i < refs[0].size; ++i) {
      // A packet chunk is always sent whole (c elements; zeros past the data), so a receiver that knows only
      // the slot (a scratch destination) waits for exactly what arrives.
      const Span src = spanOf(a, me, chunkOf(refs[1], i));
      const uint64_t slotBytes = a.chunkElems * a.elemBytes;
      LL16Packet* dst = packetsOf(a, op.peer, refs[0].index + i, ep.half);
      const uint32_t align = alignClass(src.ptr);
      for (uint64_t j = threadIdx.x; j < packsOf(slotBytes); j += blockDim.x)
        reduction::writePackLL(dst, j, loadPack(src.ptr, j, src.bytes, align), ep.flag);
    }
  }

  MESHCOMM_DEVICE_INLINE bool barrier(const OpRecord& op) {
    __shared__ int ok;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t* counter = a.barriers + op.barrier;
      __threadfence();
      atomicAdd(reinterpret_cast<unsigned long long*>(counter), 1ull);
      const uint64_t target = ep.epoch * op.members;
      ok = device::spinUntil(
               [&](uint64_t& seen) {
                 seen = *reinterpret_cast<volatile uint64_t*>(counter);
                 return device::reached(seen, target);
               },
               ctx, meshcomm::DeviceOp::SemaphoreWait, target)
               ? 1
               : 0;
      __threadfence();
    }
    __syncthreads();
    return ok != 0;
  }

  // Runs one op; false stops the block (a wait that timed out or was aborted).
  MESHCOMM_DEVICE_INLINE bool run(const OpRecord& op) {
    const RefRecord* refs = a.refs + op.firstRef;
    switch (static_cast<OpKind>(op.kind)) {
      case OpKind::Copy:
      case OpKind::Put:
      case OpKind::Get:
        return move(op, refs);
      case OpKind::Reduce:
        return reduce(op, refs);
      case OpKind::Signal:
        signalOn(op);
        return true;
      case OpKind::Wait:
        return waitOn(op);
      case OpKind::PutPackets:
        putPackets(op, refs);
        return true;
      case OpKind::UnpackPackets:
      case OpKind::ReducePackets:
        return receivePackets(op, refs);
      case OpKind::Barrier:
        return barrier(op);
      case OpKind::Flush:  // the loader refuses port channels (not executable yet)
        return false;
    }
    return false;
  }
};

template <DataType D, ReduceOp Op>
__global__ void __launch_bounds__(kMaxThreads) planKernel(PlanLaunch a) {
  Executor<D, Op> x{a, device::Reducer<D, Op>(a.red), reduction::beginLLEpoch(a.epoch),
                    reduction::anySpinContext(a.view)};
  const BlockRecord b = a.blocks[blockIdx.x];
  for (uint32_t i = 0; i < b.numOps; ++i) {
    const OpRecord op = a.ops[b.firstOp + i];
    // Every thread runs every op (the ops' own barriers keep the block together); a failed wait stops it.
    if (!__syncthreads_and(x.run(op) ? 1 : 0)) break;
  }
  __syncthreads();
  if (threadIdx.x == 0) reduction::finishLLEpoch(a.epoch, x.ep);
}

}  // namespace

bool launchPlan(const PlanLaunch& launch, int blocks, int threads, DataType dtype, ReduceOp op,
                cudaStream_t stream) {
  return dispatchReduction(dtype, op, [&](auto tag) {
    using Tag = decltype(tag);
    planKernel<Tag::kType, Tag::kOp><<<blocks, threads, 0, stream>>>(launch);
  });
}

}  // namespace meshcomm::plan
