// Device pieces shared by the reduction algorithms: 16-byte pack loads and stores at any alignment, LL16
// pack transfer with one combined spin over all peers, the LL epoch (flag) words, and rank-order
// reduction of one pack. Host pieces: reduction_common.hpp.
#pragma once

#include <cstdint>

#include "collectives/algorithms/reduction_common.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/packet.hpp"
#include "meshcomm/device/reduce.hpp"

namespace meshcomm::reduction {

// ---- pack I/O ---------------------------------------------------------------------------------------------

// Pack `pack` (bytes [16*pack, 16*pack+16)) of a buffer of `bytes` bytes at `base` whose alignClass is
// `align`; bytes past the end read as zero and are never touched.
MESHCOMM_DEVICE_INLINE uint4 loadPack(const char* base, uint64_t pack, uint64_t bytes, uint32_t align) {
  const uint64_t off = pack * kPackBytes;
  const char* p = base + off;
  if (off + kPackBytes <= bytes) {
    if (align == 16) return *reinterpret_cast<const uint4*>(p);
    if (align == 8) {
      const uint2 a = reinterpret_cast<const uint2*>(p)[0];
      const uint2 b = reinterpret_cast<const uint2*>(p)[1];
      return make_uint4(a.x, a.y, b.x, b.y);
    }
    if (align == 4) {
      const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
      return make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  // Partial pack (the buffer's tail) or byte-aligned: byte accesses, assembled without local memory.
  const uint32_t n = off >= bytes ? 0u : static_cast<uint32_t>(bytes - off < 16 ? bytes - off : 16);
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (uint32_t i = 0; i < 16; ++i) {
    if (i < n) w[i / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * (i % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Stores pack `pack` of a buffer of `bytes` bytes; bytes past the end are not written.
MESHCOMM_DEVICE_INLINE void storePack(char* base, uint64_t pack, uint64_t bytes, uint32_t align,
                                      const uint4& x) {
  const uint64_t off = pack * kPackBytes;
  char* p = base + off;
  if (off + kPackBytes <= bytes) {
    if (align == 16) {
      *reinterpret_cast<uint4*>(p) = x;
      return;
    }
    if (align == 8) {
      reinterpret_cast<uint2*>(p)[0] = make_uint2(x.x, x.y);
      reinterpret_cast<uint2*>(p)[1] = make_uint2(x.z, x.w);
      return;
    }
    if (align == 4) {
      uint32_t* w = reinterpret_cast<uint32_t*>(p);
      w[0] = x.x;
      w[1] = x.y;
      w[2] = x.z;
      w[3] = x.w;
      return;
    }
  }
  const uint32_t n = off >= bytes ? 0u : static_cast<uint32_t>(bytes - off < 16 ? bytes - off : 16);
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (uint32_t i = 0; i < 16; ++i) {
    if (i < n) p[i] = static_cast<char>((w[i / 4] >> (8 * (i % 4))) & 0xffu);
  }
}

// ---- LL epoch ---------------------------------------------------------------------------------------------

// The LL epoch of one algorithm lives in kLLEpochWords device words, all equal between launches: block b
// reads word b at its start (epoch = word + 1); after its last packet read and a __syncthreads() its threads
// write the epoch to every word j = b (mod gridDim.x). So every block of a launch sees the same epoch, the
// words stay equal whatever the grid of the next launch (kernel boundary), no block reads a word another
// block of its launch writes, and no atomic ends a launch. Never reset; graph replays continue the sequence.
// The grid must not exceed kLLEpochWords (each kernel's block cap asserts it).
struct LLEpoch {
  uint64_t epoch;  // this launch's epoch (>= 1)
  uint32_t flag;   // packet flag: never 0; differs between consecutive uses of one half
  uint32_t half;   // packet-region half (epoch parity)
};

MESHCOMM_DEVICE_INLINE LLEpoch beginLLEpoch(const uint64_t* words) {
  LLEpoch e;
  e.epoch = reinterpret_cast<const volatile uint64_t*>(words)[blockIdx.x] + 1;
  e.flag = llPacketFlag(e.epoch);
  e.half = static_cast<uint32_t>(e.epoch & 1);
  return e;
}

// Every thread of every block, once per launch (also after a timeout), after the block's last packet read
// and a __syncthreads() (every thread has read the epoch by then). Plain stores: read by the next launch.
MESHCOMM_DEVICE_INLINE void finishLLEpoch(uint64_t* words, const LLEpoch& e) {
  for (uint64_t j = blockIdx.x + static_cast<uint64_t>(threadIdx.x) * gridDim.x; j < kLLEpochWords;
       j += static_cast<uint64_t>(blockDim.x) * gridDim.x)
    words[j] = e.epoch;
}

// ---- region call arguments
// ---------------------------------------------------------------------------------

// The packet region of a region reduction (the LL reductions, reduce_direct) and its LL epoch words.
struct ReductionRegion {
  uint64_t slotBytes = 0;  // per slot; 0: the packet buffer had no room (non-empty calls unsupported)
  size_t offset = 0;       // of the region in every rank's packet buffer
  uint64_t* epoch = nullptr;

  // At initialize(): the region of `regionBytes` (when a slot of `slot` bytes fits at all) and the epoch
  // words (always: every rank allocates the same).
  void reserve(CommResources& resources, uint64_t slot, uint64_t regionBytes) {
    slotBytes = slot;
    if (slotBytes > 0) offset = resources.reservePacketRegion(regionBytes);
    epoch = resources.allocateDeviceWords(kLLEpochWords);
  }
};

// Launch arguments of a reduction kernel over its ReductionRegion.
struct RegionCallArgs {
  CommDeviceView view;
  const char* input;
  char* output;
  uint64_t bytes;         // count * element size (allreduce/reduce: the message; reduce-scatter: per rank)
  uint64_t regionOffset;  // of the region in every rank's packet buffer
  uint64_t slotBytes;     // bytes per slot of the region
  uint64_t* epoch;        // kLLEpochWords device words
  ReduceParams red;
};

inline RegionCallArgs regionCallArgs(CommResources& resources, const CollectiveArgs& args,
                                     const ReductionRegion& region) {
  RegionCallArgs a;
  a.view = resources.view();
  a.input = static_cast<const char*>(args.input);
  a.output = static_cast<char*>(args.output);
  a.bytes = args.count * dataTypeSize(args.dtype);
  a.regionOffset = region.offset;
  a.slotBytes = region.slotBytes;
  a.epoch = region.epoch;
  a.red = makeReduceParams(args.op, resources.topology().nRanks);
  return a;
}

// ---- LL16 packs -------------------------------------------------------------------------------------------

// Pack layout in packet slots: packPacketIndex (reduction_common.hpp).
static_assert(kPackPacketBytes == 2 * sizeof(LL16Packet));

// Writes pack `pack` into the packet array (relaxed volatile stores; the flag in each 8-byte half makes
// each packet self-validating, so the reader needs no fence).
MESHCOMM_DEVICE_INLINE void writePackLL(LL16Packet* packets, uint64_t pack, const uint4& v, uint32_t flag) {
  packets[packPacketIndex(pack, 0)].write(v.x, v.y, flag);
  packets[packPacketIndex(pack, 1)].write(v.z, v.w, flag);
}

// One poll of gatherPacksLL: reads every still-missing packet once. The ranks go in waves of kPollWave: a
// wave's loads are chosen from the pending set as it was at the wave's start and all issued before any flag
// is checked, so they are in flight together (one L2/NVLink round trip per wave, not one per packet); the
// wave bounds the registers the loads hold (4 words a packet). Holds the values itself (no references to
// arrays) so they stay in registers.
struct GatherPacksPoll {
  static constexpr int kPollWave = 4;  // ranks per wave: up to 8 packets in flight
  uint4 vals[kMaxRanks];
  const LL16Packet* base;
  uint64_t slotPackets;
  uint64_t pack;
  uint32_t flag;
  uint32_t pending;
  int32_t firstMissing;

  MESHCOMM_DEVICE_INLINE bool operator()(uint64_t& seen) {
#pragma unroll
    for (int w = 0; w < kMaxRanks; w += kPollWave) {
      const uint32_t wanted = pending;
      uint4 lo[kPollWave], hi[kPollWave];
#pragma unroll
      for (int i = 0; i < kPollWave; ++i) {
        const int r = w + i;
        const LL16Packet* row = base + r * slotPackets;
        if (wanted & (1u << (2 * r))) lo[i] = row[packPacketIndex(pack, 0)].load();
        if (wanted & (2u << (2 * r))) hi[i] = row[packPacketIndex(pack, 1)].load();
      }
#pragma unroll
      for (int i = 0; i < kPollWave; ++i) {
        const int r = w + i;
        if ((wanted & (1u << (2 * r))) && LL16Packet::holds(lo[i], flag)) {
          vals[r].x = lo[i].x;
          vals[r].y = lo[i].z;
          pending &= ~(1u << (2 * r));
        }
        if ((wanted & (2u << (2 * r))) && LL16Packet::holds(hi[i], flag)) {
          vals[r].z = hi[i].x;
          vals[r].w = hi[i].z;
          pending &= ~(2u << (2 * r));
        }
      }
    }
    seen = pending;
    firstMissing = pending != 0 ? (__ffs(static_cast<int>(pending)) - 1) / 2 : -1;
    return pending == 0;
  }
};
static_assert(kMaxRanks % GatherPacksPoll::kPollWave == 0, "whole waves");

// Spins until pack `pack` of every rank r in `mask` has arrived with `flag` in slot r
// (slot r = base + r * slotPackets packets) and returns the values in poll.vals[r] (other entries zero).
// ok = false on timeout or abort (reported with the first missing rank as the peer).
MESHCOMM_DEVICE_INLINE GatherPacksPoll gatherPacksLL(const LL16Packet* base, uint64_t slotPackets,
                                                     uint64_t pack, uint32_t mask, uint32_t flag,
                                                     SpinContext& ctx, bool& ok) {
  GatherPacksPoll poll{};
  poll.base = base;
  poll.slotPackets = slotPackets;
  poll.pack = pack;
  poll.flag = flag;
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r)
    if (mask & (1u << r)) poll.pending |= 3u << (2 * r);
  ok = true;
  if (poll.pending != 0) {
    ok = device::spinUntil(
        [&](uint64_t& seen) {
          const bool done = poll(seen);
          ctx.peer = poll.firstMissing;
          return done;
        },
        ctx, DeviceOp::PacketRead, flag);
  }
  return poll;
}

// Timeout-reporting context for spins not tied to one channel (LL spins over all peers).
MESHCOMM_DEVICE_INLINE SpinContext anySpinContext(const CommDeviceView& v) {
  if (v.nRanks < 2) return SpinContext{nullptr, 0, v.rank, -1};
  return device::channelRef(v, device::peerAt(v, 0), 0).semaphore.spin;
}

// ---- rank-order reduction
// ------------------------------------------------------------------------------------

// Reduces ranks 0..n-1 in rank order, taking `own` (this rank's raw input) for rank `me` and vals[r] (peer
// r's contribution, already prescaled by its owner) for the others. Unrolled over kMaxRanks with constant
// indices, so vals stays in registers.
template <DataType D, ReduceOp Op>
MESHCOMM_DEVICE_INLINE uint4 reduceRankOrder(const device::Reducer<D, Op>& red,
                                             const uint4 (&vals)[kMaxRanks], const uint4& own, int me,
                                             int n) {
  typename device::Reducer<D, Op>::Accs acc;
  if (me == 0) {
    red.first(acc, own);
  } else {
    red.firstPrescaled(acc, vals[0]);
  }
#pragma unroll
  for (int r = 1; r < kMaxRanks; ++r) {
    if (r < n) {
      if (r == me) {
        red.accumulate(acc, own);
      } else {
        red.accumulatePrescaled(acc, vals[r]);
      }
    }
  }
  return red.finish(acc);
}

// Copies `bytes` of this rank's input to where a peer reduces it (16-byte aligned `dst`), prescaled for
// premulsum (the other operators copy the bytes as they are). Plain global stores: the caller orders them
// before its signal.
template <int kUnroll, DataType D, ReduceOp Op>
MESHCOMM_DEVICE_INLINE void copyPrescaled(const device::Reducer<D, Op>& red, char* dst, const char* src,
                                          uint64_t bytes, uint32_t tid, uint32_t nThreads) {
  if constexpr (Op == ReduceOp::PreMulSum) {
    const uint32_t srcAlign = alignClass(src);
    for (uint64_t q = tid; q < packsOf(bytes); q += nThreads)
      storePack(dst, q, bytes, 16, red.prescale(loadPack(src, q, bytes, srcAlign)));
  } else {
    device::copy<kUnroll>(dst, src, bytes, tid, nThreads);
  }
}

}  // namespace meshcomm::reduction
