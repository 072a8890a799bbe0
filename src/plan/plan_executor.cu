// The plan executor kernel (docs/dsl.md, "The executor"): after the prologue (plan_peer_buffers.cuh) where
// the plan needs it, CUDA block b runs the ops of the rank's plan thread block b in order with the device
// primitives the native algorithms use — device::copy for copy/put/get, the channel semaphores for
// signal/wait, LL16 packs (writePackLL, gatherPacksLL) for packets, device::Reducer for reductions.
//
// The block's tables (ops, refs, every rank's buffers and packet buffers) are staged into shared memory after
// the prologue, a __syncthreads() before the first op.
//
// Memory order. put/get/copy are weak stores. signal: __syncthreads() (every thread's stores of the block
// before it), then thread 0's release increment (relaxed variant: no data ordering). wait: thread 0's acquire
// wait, then __syncthreads() before any thread's later access. Packets carry data and flag in one store and
// are read by flag. barrier: __syncthreads(), thread 0's fenced atomic arrival on the occurrence's counter
// and its acquire spin until every member block of this launch has arrived, then __syncthreads(). Port
// channels: __syncthreads(), then thread 0 pushes the trigger (the FIFO push is a release: the block's stores
// into the put's source scratch are visible to the proxy's copy); the proxy signals the peer after the
// channel's earlier puts have landed there; wait: thread 0's acquire wait on the host-signalled semaphore;
// flush: thread 0 waits until the proxy completed the channel's earlier operations; then __syncthreads().
#include "collectives/algorithms/reduction_common.cuh"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/copy.hpp"
#include "plan/device_plan.hpp"
#include "plan/plan_peer_buffers.cuh"
#include "base/kernel_modules.hpp"

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

// The tables an op's operands are resolved through, read by every op: in shared memory once the kernel staged
// them (StagedTables), else the device arrays of the launch.
struct Tables {
  const OpRecord* ops;    // the block's ops (index 0: its first)
  const RefRecord* refs;  // indexed by OpRecord::firstRef
  char* const* buffers;   // [kPlanBuffers][nRanks]: PlanLaunch::peerBuffers
  void* const* packets;   // [nRanks]: CommDeviceView::peerPackets
};

// A block's ops and refs up to these counts are staged into shared memory (larger blocks read the device
// arrays); every rank's buffers and packet buffer always are.
constexpr uint32_t kStagedOps = 64;
constexpr uint32_t kStagedRefs = 256;

// The shared-memory copy of the tables. The interpreter's operand lookups form dependent chains (op -> ref ->
// buffer -> data); from L2 each link costs a round trip, per op, on the critical path of the small calls.
struct StagedTables {
  OpRecord ops[kStagedOps];
  RefRecord refs[kStagedRefs];
  char* buffers[kPlanBuffers * kMaxRanks];
  void* packets[kMaxRanks];
};

// Every thread of the block, after the prologue (the peers' call buffers are resolved by then): copies what
// fits into `st` and returns the tables to use; a __syncthreads() follows before any thread reads them.
MESHCOMM_DEVICE_INLINE Tables stageTables(const PlanLaunch& a, const BlockRecord& b, StagedTables& st) {
  const int n = a.view.nRanks;
  for (int i = threadIdx.x; i < kPlanBuffers * n; i += blockDim.x) st.buffers[i] = a.peerBuffers[i];
  for (int i = threadIdx.x; i < n; i += blockDim.x) st.packets[i] = a.view.peerPackets[i];
  Tables t{a.ops + b.firstOp, a.refs, st.buffers, st.packets};
  if (b.numOps <= kStagedOps && b.numRefs <= kStagedRefs) {
    for (uint32_t i = threadIdx.x; i < b.numOps; i += blockDim.x) st.ops[i] = a.ops[b.firstOp + i];
    for (uint32_t i = threadIdx.x; i < b.numRefs; i += blockDim.x) st.refs[i] = a.refs[b.firstRef + i];
    t.ops = st.ops;
    t.refs = st.refs - b.firstRef;  // still indexed by firstRef
  }
  return t;
}

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
MESHCOMM_DEVICE_INLINE char* bufferOf(const PlanLaunch& a, const Tables& t, int r, uint8_t buffer) {
  if (r == a.view.rank && buffer != static_cast<uint8_t>(BufferKind::Scratch)) return a.local[buffer];
  return t.buffers[buffer * a.view.nRanks + r];
}

// A reference's bytes in rank r's memory (scratch: `size` slots of c elements).
MESHCOMM_DEVICE_INLINE Span spanOf(const PlanLaunch& a, const Tables& t, int r, const RefRecord& ref) {
  char* base = bufferOf(a, t, r, ref.buffer);
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
MESHCOMM_DEVICE_INLINE LL16Packet* packetsOf(const PlanLaunch& a, const Tables& t, int r, uint64_t index,
                                             uint32_t half) {
  return reinterpret_cast<LL16Packet*>(static_cast<char*>(t.packets[r]) + a.packetOffset +
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

// The packet operands of a reduction, reduced in the listed order. When their chunks lie within
// reduction::kMaxRanks consecutive chunks (`together`: rows[p] = chunk - the lowest), one gatherPacksLL per
// pack polls all of them, so every peer's packet is in flight at once; otherwise one gather per operand.
struct PacketOperands {
  const LL16Packet* bases[kMaxOperands];  // each operand's packet chunk (this launch's half)
  int rows[kMaxOperands];
  int count;
  bool together;
  const LL16Packet* rowBase;  // the lowest operand chunk
  uint64_t slotPackets;       // packets per scratch chunk
  uint32_t rowMask;
};

// The operands of the op a block runs, the same for every thread: computed once into shared memory (threads
// in parallel, a __syncthreads() before use and one after, before the next op's), so that no thread keeps
// per-operand arrays in local memory.
struct OperandScratch {
  Span spans[kMaxOperands + 1];  // dst, then srcs
  PacketOperands packets;
};

// Packs a thread of a data reduction keeps loading from one operand at once (reduceData).
constexpr int kPacksInFlight = 4;

template <DataType D, ReduceOp Op>
struct Executor {
  const PlanLaunch& a;
  const device::Reducer<D, Op> red;
  reduction::LLEpoch ep;
  SpinContext ctx;
  Tables t{};
  OperandScratch* operands = nullptr;  // in shared memory

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
    const Span s[2] = {spanOf(a, t, dstRank, refs[0]), spanOf(a, t, srcRank, refs[1])};
    if (s[0].ptr == nullptr || s[1].ptr == nullptr) return false;
    device::copy(s[0].ptr, s[1].ptr, opBytes(s, refs, 2), threadIdx.x, blockDim.x);
    return true;
  }

  // Pack j of every packet operand into got (operand p's value at got.vals[row(p)]); false on timeout.
  MESHCOMM_DEVICE_INLINE bool gatherOperands(const PacketOperands& pk, uint64_t j, int p,
                                             reduction::GatherPacksPoll& got) {
    bool ok = true;
    if (pk.together) {
      if (p == 0) got = reduction::gatherPacksLL(pk.rowBase, pk.slotPackets, j, pk.rowMask, ep.flag, ctx, ok);
    } else {
      got = reduction::gatherPacksLL(pk.bases[p], 0, j, 1u, ep.flag, ctx, ok);
    }
    return ok;
  }
  MESHCOMM_DEVICE_INLINE int row(const PacketOperands& pk, int p) const {
    return pk.together ? pk.rows[p] : 0;
  }
  // got.vals[r] without a dynamic index (which would put got in local memory).
  MESHCOMM_DEVICE_INLINE static uint4 valueAt(const reduction::GatherPacksPoll& got, int r) {
    uint4 v = got.vals[0];
#pragma unroll
    for (int k = 1; k < reduction::kMaxRanks; ++k)
      if (r == k) v = got.vals[k];
    return v;
  }

  // dst = operands[0] (op) operands[1] ... over `bytes`: the data spans, then the packet operands.
  MESHCOMM_DEVICE_INLINE bool reduceInto(const Span& dst, const Span* srcs, int numSrcs,
                                         const PacketOperands& pk, uint64_t bytes) {
    const uint32_t dstAlign = alignClass(dst.ptr);
    for (uint64_t j = threadIdx.x; j < packsOf(bytes); j += blockDim.x) {
      reduction::GatherPacksPoll got;
      // unpack: the packets' bytes as they are (no conversion through Acc)
      if (numSrcs == 0 && pk.count == 1) {
        if (!gatherOperands(pk, j, 0, got)) return false;
        storePack(dst.ptr, j, bytes, dstAlign, valueAt(got, row(pk, 0)));
        continue;
      }
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
      for (int p = 0; p < pk.count; ++p, ++k) {
        if (!gatherOperands(pk, j, p, got)) return false;
        if (k == 0) {
          red.firstPrescaled(acc, valueAt(got, row(pk, p)));
        } else {
          red.accumulatePrescaled(acc, valueAt(got, row(pk, p)));
        }
      }
      storePack(dst.ptr, j, bytes, dstAlign, red.finish(acc));
    }
    return true;
  }

  // dst = srcs[0] (op) srcs[1] ... over `bytes`, data operands only: a thread takes kPacksInFlight packs and
  // issues an operand's loads of all of them before summing (one load in flight a thread left the reduction
  // bound by memory latency). Operands are summed in the listed order, as reduceInto does.
  MESHCOMM_DEVICE_INLINE void reduceData(const Span& dst, const Span* srcs, int numSrcs, uint64_t bytes) {
    const uint64_t packs = packsOf(bytes), stride = blockDim.x;
    const uint32_t dstAlign = alignClass(dst.ptr);
    for (uint64_t j0 = threadIdx.x; j0 < packs; j0 += kPacksInFlight * stride) {
      typename device::Reducer<D, Op>::Accs acc[kPacksInFlight];
      for (int k = 0; k < numSrcs; ++k) {
        const uint32_t align = alignClass(srcs[k].ptr);
        uint4 x[kPacksInFlight];
#pragma unroll
        for (int u = 0; u < kPacksInFlight; ++u) {
          const uint64_t j = j0 + u * stride;
          x[u] = j < packs ? loadPack(srcs[k].ptr, j, bytes, align) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kPacksInFlight; ++u) {
          if (k == 0) {
            red.firstPrescaled(acc[u], x[u]);
          } else {
            red.accumulatePrescaled(acc[u], x[u]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kPacksInFlight; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < packs) storePack(dst.ptr, j, bytes, dstAlign, red.finish(acc[u]));
      }
    }
  }

  MESHCOMM_DEVICE_INLINE bool reduce(const OpRecord& op, const RefRecord* refs) {
    const int count = 1 + op.numSrcs;
    if (static_cast<int>(threadIdx.x) < count)
      operands->spans[threadIdx.x] = spanOf(a, t, a.view.rank, refs[threadIdx.x]);
    __syncthreads();
    reduceData(operands->spans[0], operands->spans + 1, op.numSrcs,
               opBytes(operands->spans, refs, count));  // the loader: >= 2 srcs
    __syncthreads();  // every thread is done with the spans before the next op's
    return true;
  }

  // reduce_packets and unpack_packets, chunk by chunk: dst chunk i = srcs chunk i (op) packet chunks i.
  MESHCOMM_DEVICE_INLINE bool receivePackets(const OpRecord& op, const RefRecord* refs) {
    const int me = a.view.rank;
    const bool unpack = op.kind == static_cast<uint8_t>(OpKind::UnpackPackets);
    const int numSrcs = unpack ? 0 : op.numSrcs;
    const int numPackets = unpack ? 1 : op.numPackets;
    const RefRecord* packetRefs = refs + 1 + numSrcs;
    PacketOperands& pk = operands->packets;
    for (uint32_t i = 0; i < refs[0].size; ++i) {
      // The chunk's operands, by the block's threads: thread k <= numSrcs the span of operand k, the last
      // thread the packet operands.
      if (static_cast<int>(threadIdx.x) <= numSrcs)
        operands->spans[threadIdx.x] = spanOf(a, t, me, chunkOf(refs[threadIdx.x], i));
      if (threadIdx.x == blockDim.x - 1) {
        pk.count = numPackets;
        pk.slotPackets = a.packetChunkBytes / sizeof(LL16Packet);
        uint64_t lowest = ~0ull, highest = 0;
        for (int p = 0; p < numPackets; ++p) {
          const uint64_t c = packetRefs[p].index + i;
          pk.bases[p] = packetsOf(a, t, me, c, ep.half);
          lowest = min(lowest, c);
          highest = max(highest, c);
        }
        pk.together = numPackets > 0 && highest - lowest < static_cast<uint64_t>(reduction::kMaxRanks);
        pk.rowMask = 0;
        if (pk.together) {
          pk.rowBase = pk.bases[0] - (packetRefs[0].index + i - lowest) * pk.slotPackets;
          for (int p = 0; p < numPackets; ++p) {
            pk.rows[p] = static_cast<int>(packetRefs[p].index + i - lowest);
            pk.rowMask |= 1u << pk.rows[p];
          }
        }
      }
      __syncthreads();
      // The packet chunks only bound the count (c elements); the data chunks decide it.
      const bool ok = reduceInto(operands->spans[0], operands->spans + 1, numSrcs, pk,
                                 opBytes(operands->spans, refs, 1 + numSrcs));
      // Every thread is done with this chunk's operands before the next chunk's; a timeout stops all alike.
      if (__syncthreads_or(ok ? 0 : 1)) return false;
    }
    return true;
  }

  MESHCOMM_DEVICE_INLINE void putPackets(const OpRecord& op, const RefRecord* refs) {
    const int me = a.view.rank;
    for (uint32_t i = 0; i < refs[0].size; ++i) {
      // A packet chunk is always sent whole (c elements; zeros past the data), so a receiver that knows only
      // the slot (a scratch destination) waits for exactly what arrives.
      const Span src = spanOf(a, t, me, chunkOf(refs[1], i));
      const uint64_t slotBytes = a.chunkElems * a.elemBytes;
      LL16Packet* dst = packetsOf(a, t, op.peer, refs[0].index + i, ep.half);
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

  // put / signal / wait / flush on a port channel (scratch to the peer's scratch; plan_algorithm.cc builds
  // the channels and their proxy). False when a wait or flush timed out or was aborted.
  MESHCOMM_DEVICE_INLINE bool portOp(const OpRecord& op, const RefRecord* refs) {
    __shared__ int ok;
    __syncthreads();  // every thread's earlier stores (a put's source) before thread 0's trigger
    if (threadIdx.x == 0) {
      PortChannelDeviceHandle ch = a.ports[op.channel];
      bool done = true;
      switch (static_cast<OpKind>(op.kind)) {
        case OpKind::Put: {
          const uint64_t slot = a.chunkElems * a.elemBytes;
          ch.put(refs[0].index * slot, refs[1].index * slot, min(refs[0].size, refs[1].size) * slot);
          break;
        }
        case OpKind::Signal:
          ch.signal();
          break;
        case OpKind::Wait:
          done = ch.wait();
          break;
        case OpKind::Flush:
          done = ch.flush();
          break;
        default:  // the loader allows no other op on a port channel
          done = false;
          break;
      }
      ok = done ? 1 : 0;
    }
    __syncthreads();
    return ok != 0;
  }

  // Runs one op; false stops the block (a wait that timed out or was aborted).
  MESHCOMM_DEVICE_INLINE bool run(const OpRecord& op) {
    const RefRecord* refs = t.refs + op.firstRef;
    if (op.port) return portOp(op, refs);
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
      case OpKind::Flush:  // on port channels only (above)
        return false;
    }
    return false;
  }
};

static_assert(plan::kMaxThreadBlocks <= static_cast<int>(reduction::kLLEpochWords),
              "every block of a plan has an epoch word");

template <DataType D, ReduceOp Op>
__global__ void __launch_bounds__(kMaxThreads) planKernel(PlanLaunch a) {
  Executor<D, Op> x{a, device::Reducer<D, Op>(a.red), reduction::beginLLEpoch(a.epoch),
                    reduction::anySpinContext(a.view)};
  __shared__ StagedTables staged;
  __shared__ OperandScratch operands;
  x.operands = &operands;
  const uint32_t call = static_cast<uint32_t>(x.ep.epoch);
  const bool tracer = threadIdx.x == 0;
  if (tracer) a.trace.record(call, static_cast<uint32_t>(PlanTraceEvent::Start), 0);
  const BlockRecord b = a.blocks[blockIdx.x];
  const bool ready = !a.prologue.run || runPrologue(a.view, a.prologue, x.ep.epoch, x.ep.half, x.ctx);
  if (tracer && a.prologue.run) a.trace.record(call, static_cast<uint32_t>(PlanTraceEvent::Prologue), 0);
  x.t = stageTables(a, b, staged);
  __syncthreads();
  if (tracer) a.trace.record(call, static_cast<uint32_t>(PlanTraceEvent::Staged), 0);
  for (uint32_t i = 0; ready && i < b.numOps; ++i) {
    const OpRecord op = x.t.ops[i];
    // Every thread runs every op (the ops' own barriers keep the block together); a failed wait stops it.
    if (!__syncthreads_and(x.run(op) ? 1 : 0)) break;
    if (tracer) a.trace.record(call, kFirstOpEvent + op.kind, i);
  }
  __syncthreads();
  reduction::finishLLEpoch(a.epoch, x.ep);
  if (tracer) a.trace.record(call, static_cast<uint32_t>(PlanTraceEvent::End), 0);
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

MESHCOMM_KERNEL_MODULE()
