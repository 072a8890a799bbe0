// Shared pieces of the data-movement algorithms (allgather, alltoall(v), broadcast, gather, scatter,
// sendrecv). Two engines, each written once:
//
// 1. The LL exchange (llExchangeKernel, LLExchangeAlgorithm): every rank writes its bytes for peer p as
//    LL16 packets into p's packet region, slot [rank], half (pair epoch & 1); p spins on the flags and
//    unpacks. No semaphores. Used by allgather_ll and alltoall_ll (they differ only in the input stride),
//    and with the LL stream protocol's header by sendrecv_ll's even exchanges (ll_stream.cu).
//
// 2. The pairwise stream engine (pairwiseKernel<Plan>, EngineAlgorithm; the *_scratch algorithms): block
//    (peer p, index c) exchanges with p's block (this rank, c); each direction is a stream of pieces through
//    the receiver's engine buffers on lane c, with persistent data/credit counters (engine_streams.cuh:
//    NCCL's head/tail protocol, no opening handshake). A Plan says what each rank sends to / receives from
//    each peer (byte streams) and what it copies locally; allgather, alltoall(v), broadcast, gather, scatter
//    and sendrecv are Plans. Per block:
//      [kHeader plans: write my header (LL packets: what I send, what I expect back, a signature of both)]
//      step s = 0, 1, ...:
//               put:  await the credit of piece s (the peer has copied out the piece K before it on this
//                     lane), piece s of my stream -> the peer's buffer, publish
//               copy: await the peer's piece s-kCopyLag, copy it out, release its buffer
//               one slice of the local copy (up to kSelfCopySlices slices of >= kSelfSliceBytes)
//    (the publishes and releases are a publisher warp's, overlapping the next steps: see pairwiseKernel)
//      [kHeader plans: check the peer's header unless a wait already did (the waits poll it)]
//    T = ceil(bytes / roundBytes) per direction, with one roundBytes for both directions of the pair, from
//    the plan's counts of the pair: both sides count the same pieces when their plans agree, and the header
//    (kHeader) tells them when they do not. A sender runs up to K pieces ahead of its receiver.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "collectives/algorithms/engine_streams.cuh"
#include "meshcomm/algorithm.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/named_barrier.hpp"
#include "meshcomm/device/packet.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::movement {

constexpr int kEngineThreads = 512;  // threads of a pairwise-engine block (at most; 64 regs at 1024 spilled)
constexpr int kLLThreads = 512;      // default threads of an LL block
constexpr int kLLMaxBlocksPerPeer = 64;         // epoch words per peer of an LL algorithm
constexpr int kLLPacketsPerThread = 1;          // LL blocks per peer = packets / (threads * this)
constexpr uint32_t kSelfCopySlices = 8;         // at most: the local copy is spread over the first steps
constexpr uint64_t kSelfSliceBytes = 64 << 10;  // at least per slice (smaller copies go in one piece)
constexpr uint64_t kHeaderBytes = 3 * sizeof(LL16Packet);  // PairHeader (the engine's)
// LL region budgets tried in order at initialize() (the first one the packet buffer can still hold).
constexpr uint64_t kLLRegionBudgets[] = {4u << 20, 2u << 20, 1u << 20, 512u << 10, 256u << 10};

// ---- per-pair epochs --------------------------------------------------------------------------------
// One epoch per (peer, block-local index), in algorithm-owned device words ([nRanks][stride], zeroed).
// A pair's epoch counts the calls in which the two ranks exchanged packets; both sides advance it in the
// same calls, so it needs no agreement beyond the call sequence. Block (peer, c) reads word c at the
// start and, after its last packet read, writes epoch+1 to every word j = c (mod blocksPerPeer) below
// `stride`: all words of a pair stay equal even when the block count changes between calls, and no block
// of the same launch reads a word another block writes. LL flag = llPacketFlag(epoch); the
// packet half is epoch & 1. Safety of the halves: a sender writes half h in pair-epoch e+2 only after its
// own kernel of epoch e+1 completed, and that kernel read the peer's epoch-(e+1) packets, which the peer
// wrote after its kernel of epoch e (the last reader of half h) had completed.
struct PairEpochs {
  uint64_t* words = nullptr;
  int stride = 0;

#if defined(__CUDACC__)
  MESHCOMM_DEVICE_INLINE uint64_t load(int peer, int c) const {
    return words[static_cast<uint64_t>(peer) * stride + c];
  }
  // Every thread of block (peer, c) calls it once, after the block's last packet read (a __syncthreads()
  // between them): thread t writes words c + (t + k*nt)*blocksPerPeer, so the stride/blocksPerPeer stores
  // (64 at one block per peer) go out in parallel instead of one after another at the end of the kernel.
  // Plain stores, read by the next launch only (kernel boundary); word c (read by this block at its start)
  // is written by thread 0.
  MESHCOMM_DEVICE_INLINE void advance(int peer, int c, int blocksPerPeer, uint64_t epoch, uint32_t tid,
                                      uint32_t nt) const {
    const uint64_t step = static_cast<uint64_t>(nt) * blocksPerPeer;
    for (uint64_t j = c + static_cast<uint64_t>(tid) * blocksPerPeer; j < static_cast<uint64_t>(stride);
         j += step)
      words[static_cast<uint64_t>(peer) * stride + j] = epoch + 1;
  }
#endif
};

// ---- packet regions -----------------------------------------------------------------------------------
// A region reserved at the same offset of every rank's packet buffer: [half 0|1][sender slot 0..n-1].
// Rank s writes its packets for rank r at r's region, slot s; r reads its own region, slot s.
struct PacketRegion {
  uint64_t offset = 0;
  uint64_t slotBytes = 0;
  uint64_t halfBytes = 0;

#if defined(__CUDACC__)
  MESHCOMM_DEVICE_INLINE char* inbox(const CommDeviceView& v, int peer, uint64_t half) const {
    return static_cast<char*>(v.peerPackets[v.rank]) + offset + half * halfBytes +
           static_cast<uint64_t>(peer) * slotBytes;
  }
  MESHCOMM_DEVICE_INLINE char* outbox(const CommDeviceView& v, int peer, uint64_t half) const {
    return static_cast<char*>(v.peerPackets[peer]) + offset + half * halfBytes +
           static_cast<uint64_t>(v.rank) * slotBytes;
  }
#endif
};

inline PacketRegion reservePacketRegion(CommResources& resources, uint64_t slotBytes) {
  PacketRegion r;
  r.slotBytes = roundUp16(slotBytes);
  r.halfBytes = r.slotBytes * static_cast<uint64_t>(resources.view().nRanks);
  r.offset = resources.reservePacketRegion(2 * r.halfBytes);
  return r;
}

// An LL algorithm's state: its packet region (the largest of `budgets` the packet buffer still holds) and
// per-pair epoch words. maxBytesPerPeer stays 0 when no budget fits (or n < 2): the algorithm then declines.
struct LLRegionState {
  PacketRegion region;
  PairEpochs epochs;
  uint64_t maxBytesPerPeer = 0;
};

template <size_t N>
LLRegionState reserveLLRegion(CommResources& resources, const uint64_t (&budgets)[N]) {
  LLRegionState st;
  const CommDeviceView& v = resources.view();
  if (v.nRanks < 2) return st;
  for (uint64_t budget : budgets) {
    const uint64_t slot =
        budget / 2 / static_cast<uint64_t>(v.nRanks) / sizeof(LL16Packet) * sizeof(LL16Packet);
    if (slot < sizeof(LL16Packet)) break;
    try {
      st.region = reservePacketRegion(resources, slot);
      st.maxBytesPerPeer = slot / sizeof(LL16Packet) * LL16Packet::kPayloadBytes;
      break;
    } catch (const std::exception&) {
      // the packet buffer cannot hold this budget; try a smaller one (same outcome on every rank)
    }
  }
  if (st.maxBytesPerPeer == 0) return st;
  st.epochs.stride = kLLMaxBlocksPerPeer;
  st.epochs.words = resources.allocateDeviceWords(static_cast<size_t>(v.nRanks) * kLLMaxBlocksPerPeer);
  return st;
}

// Why an LL algorithm whose slot carries `maxBytesPerPeer` cannot run `args` (count elements per peer), or
// "".
inline std::string llUnsupportedReason(const CollectiveArgs& args, const CommTopology& topo,
                                       uint64_t maxBytesPerPeer) {
  if (!topo.allPeersIpc) return "needs every peer reachable by CUDA IPC";
  const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
  if (topo.nRanks > 1 && bytes > maxBytesPerPeer) {
    return detail::concat(bytes, " bytes per peer exceed the LL slot (", maxBytesPerPeer,
                          " bytes; MESHCOMM_PACKET_BYTES)");
  }
  return {};
}

// Default LL blocks per peer: one packet per thread (kLLPacketsPerThread), at most kLLMaxBlocksPerPeer and
// the SMs' share of one peer. LL kernels are latency-bound on their flag polls, so more blocks win: with 4
// packets per thread alltoall_ll took 1.49x and allgather_ll 1.47x as long at 64 KiB on
// 4x H200.
inline int llBlocksPerPeer(uint64_t bytes, int threads, const CommTopology& topo) {
  const uint64_t packets = divUp(bytes, LL16Packet::kPayloadBytes);
  const int want = static_cast<int>(std::min<uint64_t>(
      kLLMaxBlocksPerPeer, divUp(packets, static_cast<uint64_t>(threads) * kLLPacketsPerThread)));
  const int bySm = std::max(1, topo.smCount / std::max(1, topo.nRanks - 1));
  return std::max(1, std::min(want, bySm));
}

// The grid of an LL launch: the caller's block count split over the peers, else `defaultPerPeer`, clamped to
// [1, kLLMaxBlocksPerPeer] blocks per peer. Identical on every rank (depends on call arguments only).
struct LLGrid {
  int blocksPerPeer;
  int blocks;
};
inline LLGrid llGrid(const LaunchConfig& config, int nRanks, int defaultPerPeer) {
  const int nPeers = nRanks - 1;
  int b = config.nBlocks > 0 && nPeers > 0 ? config.nBlocks / nPeers : defaultPerPeer;
  b = std::max(1, std::min(b, kLLMaxBlocksPerPeer));
  return {b, nPeers > 0 ? nPeers * b : 1};
}

// Host check before an LL launch (the selector already declines larger calls; this guards forced ones).
inline void requireFitsLLSlot(const CommDeviceView& v, const std::string& name, uint64_t bytes,
                              uint64_t maxBytesPerPeer) {
  MESHCOMM_REQUIRE(v.nRanks < 2 || bytes <= maxBytesPerPeer, "rank ", v.rank, ": ", name, ": ", bytes,
                   " bytes per peer exceed the LL slot of ", maxBytesPerPeer, " bytes");
}

// A rooted/pairwise engine plan's common fields from a call: buffers, bytes per rank (count elements), root.
template <typename Plan>
Plan planFromArgs(const CollectiveArgs& args) {
  Plan plan;
  plan.input = const_cast<char*>(static_cast<const char*>(args.input));
  plan.output = static_cast<char*>(args.output);
  plan.bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
  plan.root = args.root;
  return plan;
}

// ---- block roles ----------------------------------------------------------------------------------------
// Blocks [0, nPeers*B) serve peers: block b serves peerAt(b / B) with block-local index (= channel) b % B,
// so every peer is in flight at once and ranks start on different peers. Other blocks serve none.
struct BlockRole {
  int peer;  // -1: none
  int c;
};

#if defined(__CUDACC__)
MESHCOMM_DEVICE_INLINE BlockRole blockRole(const CommDeviceView& v, int blocksPerPeer) {
  const int b = static_cast<int>(blockIdx.x);
  if (b < (v.nRanks - 1) * blocksPerPeer) return {device::peerAt(v, b / blocksPerPeer), b % blocksPerPeer};
  return {-1, 0};
}

// Funnel-shifts the 16 bytes at byte offset k (1..15) of the 32 bytes {lo, hi}.
MESHCOMM_DEVICE_INLINE uint4 shiftPack(const uint4& lo, const uint4& hi, uint32_t q, uint32_t sh) {
  // words q..q+4 of {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w} (q = k / 4 in 0..3), by selects
  const uint32_t w0 = q == 0 ? lo.x : q == 1 ? lo.y : q == 2 ? lo.z : lo.w;
  const uint32_t w1 = q == 0 ? lo.y : q == 1 ? lo.z : q == 2 ? lo.w : hi.x;
  const uint32_t w2 = q == 0 ? lo.z : q == 1 ? lo.w : q == 2 ? hi.x : hi.y;
  const uint32_t w3 = q == 0 ? lo.w : q == 1 ? hi.x : q == 2 ? hi.y : hi.z;
  const uint32_t w4 = q == 0 ? hi.x : q == 1 ? hi.y : q == 2 ? hi.z : hi.w;
  uint4 r;
  r.x = __funnelshift_r(w0, w1, sh);  // sh = 8 * (k % 4); 0 returns w0
  r.y = __funnelshift_r(w1, w2, sh);
  r.z = __funnelshift_r(w2, w3, sh);
  r.w = __funnelshift_r(w3, w4, sh);
  return r;
}

// Block-cooperative copy at any alignment, 16-byte stores wherever possible: device::copy when both
// pointers are 16-byte aligned; otherwise a byte head up to the destination's 16-byte boundary, then
// aligned 16-byte stores of funnel-shifted pairs of aligned 16-byte source loads, then a byte tail.
// (device::copy alone falls back to 1-byte accesses when the two pointers differ mod 4, e.g. alltoallv
// displacements of an odd number of bf16 elements.) The first aligned source load may touch up to 15
// bytes before src (same 16-byte-aligned chunk, so inside src's allocation; values discarded); no load
// passes src + bytes.
MESHCOMM_DEVICE_INLINE void copyBytes(char* dst, const char* src, uint64_t bytes, uint32_t tid, uint32_t nt) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0 || bytes < 64) {
    device::copy(dst, src, bytes, tid, nt);
    return;
  }
  const uint64_t head = minU(bytes, (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15);
  for (uint64_t i = tid; i < head; i += nt) dst[i] = src[i];
  dst += head;
  src += head;
  bytes -= head;
  const uint32_t k = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(src) & 15);
  // Shifted path: vector i reads aligned source vectors i and i+1; the last one must end by src + bytes
  // (16(i+2) <= bytes + k), so no load passes the end of the source; the rest goes to the byte tail.
  const uint64_t nVec = k == 0 ? bytes / 16 : minU(bytes / 16, (bytes + k) / 16 - 1);
  if (k == 0) {
    device::copy(dst, src, nVec * 16, tid, nt);
  } else {
    constexpr int kUnroll = 4;
    const auto* sv = reinterpret_cast<const uint4*>(src - k);  // aligned; vector i+1 ends past src + 16i
    auto* dv = reinterpret_cast<uint4*>(dst);
    const uint32_t q = k / 4, sh = 8 * (k % 4);
    const uint64_t stride = static_cast<uint64_t>(kUnroll) * nt;
    for (uint64_t base = tid; base < nVec; base += stride) {
      uint4 lo[kUnroll], hi[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = base + static_cast<uint64_t>(u) * nt;
        if (i < nVec) {
          lo[u] = sv[i];
          hi[u] = sv[i + 1];
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint64_t i = base + static_cast<uint64_t>(u) * nt;
        if (i < nVec) dv[i] = shiftPack(lo[u], hi[u], q, sh);
      }
    }
  }
  for (uint64_t i = nVec * 16 + tid; i < bytes; i += nt) dst[i] = src[i];
}

// Threads [0, nt) of a block (this one is tid) copy part `part` of `nParts` (16-byte-aligned shares) of a
// local copy.
MESHCOMM_DEVICE_INLINE void copyShare(char* dst, const char* src, uint64_t bytes, uint32_t part,
                                      uint32_t nParts, uint32_t tid, uint32_t nt) {
  if (dst == src || bytes == 0) return;
  const uint64_t per = roundUp16(divUp(bytes, nParts));
  const uint64_t off = per * part;
  if (off >= bytes) return;
  copyBytes(dst + off, src + off, minU(per, bytes - off), tid, nt);
}

// Records a count mismatch with `peer` (fatal for the communicator, like a timeout: the host raises it):
// CountMismatch, the bytes this rank expected and those the peer sends; SendCountMismatch, the bytes this
// rank sends and those the peer expects.
MESHCOMM_DEVICE_INLINE void reportMismatch(SpinContext ctx, int peer, uint64_t expected, uint64_t observed,
                                           DeviceOp op = DeviceOp::CountMismatch) {
  ctx.peer = peer;
  device::reportTimeout(ctx, op, expected, observed, 0);
}
#endif

// ---- byte streams -----------------------------------------------------------------------------------------
// What one rank sends to / receives from one peer: a contiguous range or (sendrecv) a list of segments.
// toScratch/fromScratch copy the stream range [off, off+len) to/from a contiguous scratch piece with threads
// [0, nt) of the block (this one is tid).
struct ContigStream {
  char* ptr = nullptr;
  uint64_t bytes = 0;

#if defined(__CUDACC__)
  MESHCOMM_DEVICE_INLINE void toScratch(char* dst, uint64_t off, uint64_t len, uint32_t tid,
                                        uint32_t nt) const {
    copyBytes(dst, ptr + off, len, tid, nt);
  }
  MESHCOMM_DEVICE_INLINE void fromScratch(const char* src, uint64_t off, uint64_t len, uint32_t tid,
                                          uint32_t nt) const {
    copyBytes(ptr + off, src, len, tid, nt);
  }
#endif
};

struct Seg {
  char* ptr;
  uint64_t bytes;
};

struct SegStream {
  const Seg* segs = nullptr;
  int n = 0;
  uint64_t bytes = 0;

#if defined(__CUDACC__)
  template <bool kToScratch>
  MESHCOMM_DEVICE_INLINE void copyRange(char* scratch, uint64_t off, uint64_t len, uint32_t tid,
                                        uint32_t nt) const {
    const uint64_t end = off + len;
    uint64_t base = 0;
    for (int i = 0; i < n && base < end; ++i) {
      const uint64_t segEnd = base + segs[i].bytes;
      const uint64_t lo = maxU(base, off), hi = minU(segEnd, end);
      if (lo < hi) {
        char* user = segs[i].ptr + (lo - base);
        char* piece = scratch + (lo - off);
        if (kToScratch)
          copyBytes(piece, user, hi - lo, tid, nt);
        else
          copyBytes(user, piece, hi - lo, tid, nt);
      }
      base = segEnd;
    }
  }
  MESHCOMM_DEVICE_INLINE void toScratch(char* dst, uint64_t off, uint64_t len, uint32_t tid,
                                        uint32_t nt) const {
    copyRange<true>(dst, off, len, tid, nt);
  }
  MESHCOMM_DEVICE_INLINE void fromScratch(const char* src, uint64_t off, uint64_t len, uint32_t tid,
                                          uint32_t nt) const {
    copyRange<false>(const_cast<char*>(src), off, len, tid, nt);
  }
#endif
};

// Defaults of the Plan interface (pairwiseKernel below): no header, no signatures.
struct PlanBase {
  static constexpr bool kHeader = false;
#if defined(__CUDACC__)
  // Bytes of this rank's local copy (an upper bound; sizes the slicing only). Unknown: the most slices.
  MESHCOMM_DEVICE_INLINE uint64_t selfBytes(const CommDeviceView&) const {
    return ~uint64_t{0};
  }
  MESHCOMM_DEVICE_INLINE uint64_t sendSig(int) const {
    return 0;
  }
  MESHCOMM_DEVICE_INLINE uint64_t recvSig(int) const {
    return 0;
  }
#endif
};

// Plans over (input, output, bytes per rank, root): allgather, broadcast, gather, scatter. Root-centred
// plans (broadcast, gather, scatter): only pairs that include the root exchange; the others
// send no signal at all (balanced: neither side of such a pair is active).
struct RootedPlanBase : PlanBase {
  char* input;
  char* output;
  uint64_t bytes;  // count * dtype size
  int root;
#if defined(__CUDACC__)
  MESHCOMM_DEVICE_INLINE bool active(const CommDeviceView& v, int peer) const {
    return v.rank == root || peer == root;
  }
  MESHCOMM_DEVICE_INLINE uint64_t selfBytes(const CommDeviceView&) const {
    return bytes;
  }
#endif
};

#if defined(__CUDACC__)
// Where a self-copy mismatch is reported (there is no channel to oneself; any peer's context carries the
// report pointer). Null report when alone.
MESHCOMM_DEVICE_INLINE SpinContext selfSpinContext(const CommDeviceView& v) {
  if (v.nRanks < 2) return SpinContext{nullptr, 0, v.rank, v.rank};
  return device::channelRef(v, device::peerAt(v, 0), 0).semaphore.spin;
}

#endif

#if defined(__CUDACC__)
// Header of a pair (kHeader plans): two LL16 packets {bytes, signature} from the block with c == 0.
MESHCOMM_DEVICE_INLINE void writeHeader(char* outbox, uint64_t bytes, uint64_t sig, uint32_t flag) {
  auto* p = reinterpret_cast<LL16Packet*>(outbox);
  p[0].write(static_cast<uint32_t>(bytes), static_cast<uint32_t>(bytes >> 32), flag);
  p[1].write(static_cast<uint32_t>(sig), static_cast<uint32_t>(sig >> 32), flag);
}

MESHCOMM_DEVICE_INLINE bool readHeader(const char* inbox, uint32_t flag, const SpinContext& ctx,
                                       uint64_t& bytes, uint64_t& sig) {
  const auto* p = reinterpret_cast<const LL16Packet*>(inbox);
  uint32_t w[4] = {0, 0, 0, 0};
  // Both packets in each poll: one load round trip, not two in a row, once they are there.
  const bool ok = device::spinUntil(
      [&](uint64_t& seen) {
        const bool first = p[0].tryRead(flag, w[0], w[1]);
        const bool second = p[1].tryRead(flag, w[2], w[3]);
        seen = w[0];
        return first && second;
      },
      ctx, DeviceOp::PacketRead, flag);
  if (!ok) return false;
  bytes = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  sig = static_cast<uint64_t>(w[2]) | (static_cast<uint64_t>(w[3]) << 32);
  return true;
}

#endif

// Header of an engine pair (kHeader plans), written by the block with c == 0 at its start: the bytes this
// rank sends to the peer, the bytes it expects back and a signature of both directions' operation sizes.
// Both sides cut both directions of the pair by their own plan, as plans without a header do; the header
// only confirms that the two plans agree. Each side compares the peer's header with the one its own plan
// says the peer writes (peerPairHeader), which differs on both sides when any of the four quantities does,
// so a disagreement is seen by both and neither waits for what the other will not do.
struct PairHeader {
  uint64_t bytes, sig, expect;
  MESHCOMM_HOST_DEVICE_INLINE bool operator==(const PairHeader& o) const {
    return bytes == o.bytes && sig == o.sig && expect == o.expect;
  }
};

// Signature of a pair from one side: its send and receive signatures of the pair (order-sensitive).
MESHCOMM_HOST_DEVICE_INLINE uint64_t pairSig(uint64_t sendSig, uint64_t recvSig) {
  const uint64_t h = (0xCBF29CE484222325ull ^ sendSig) * 0x100000001B3ull;
  return (h ^ (recvSig + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2))) * 0x100000001B3ull;
}
// The header a rank writes for a pair: what it sends, its signature of the pair, what it expects back.
MESHCOMM_HOST_DEVICE_INLINE PairHeader ownPairHeader(uint64_t sendBytes, uint64_t recvBytes, uint64_t sendSig,
                                                     uint64_t recvSig) {
  return {sendBytes, pairSig(sendSig, recvSig), recvBytes};
}
// The header the peer writes when its plan agrees with this rank's (the same pair seen from the other side).
MESHCOMM_HOST_DEVICE_INLINE PairHeader peerPairHeader(uint64_t sendBytes, uint64_t recvBytes,
                                                      uint64_t sendSig, uint64_t recvSig) {
  return ownPairHeader(recvBytes, sendBytes, recvSig, sendSig);
}

#if defined(__CUDACC__)
// Three LL16 packets, each visible on its own through its flags (a reader wants all three).
MESHCOMM_DEVICE_INLINE void writePairHeader(char* outbox, const PairHeader& h, uint32_t flag) {
  writeHeader(outbox, h.bytes, h.sig, flag);
  reinterpret_cast<LL16Packet*>(outbox)[2].write(static_cast<uint32_t>(h.expect),
                                                 static_cast<uint32_t>(h.expect >> 32), flag);
}

// One poll of the three packets (LL16 reads: no fence, the header carries no data to acquire).
MESHCOMM_DEVICE_INLINE bool tryReadPairHeader(const char* inbox, uint32_t flag, PairHeader& h) {
  const auto* p = reinterpret_cast<const LL16Packet*>(inbox);
  uint32_t w[6];
  const bool a = p[0].tryRead(flag, w[0], w[1]);
  const bool b = p[1].tryRead(flag, w[2], w[3]);
  const bool c = p[2].tryRead(flag, w[4], w[5]);
  if (!(a && b && c)) return false;
  h.bytes = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  h.sig = static_cast<uint64_t>(w[2]) | (static_cast<uint64_t>(w[3]) << 32);
  h.expect = static_cast<uint64_t>(w[4]) | (static_cast<uint64_t>(w[5]) << 32);
  return true;
}

// Spins for the peer's header; false on timeout/abort (reported through ctx).
MESHCOMM_DEVICE_INLINE bool readPairHeader(const char* inbox, uint32_t flag, const SpinContext& ctx,
                                           PairHeader& h) {
  return device::spinUntil(
      [&](uint64_t& seen) {
        const bool got = tryReadPairHeader(inbox, flag, h);
        seen = got ? 1 : 0;
        return got;
      },
      ctx, DeviceOp::PacketRead, flag);
}

// Thread 0's check of the peer's pair header (kHeader plans), once per active block and call: polled by its
// counter waits (a wait check, engine_streams.cuh), so a disagreement ends every wait on both sides instead
// of a timeout, and read at the end by finish() if no wait saw it. A header that differs from `want` is
// reported as a count mismatch (fatal for the communicator): the receiver's view when the peer sends other
// bytes, else the sender's when the peer expects other bytes, else the operation sizes (equal bytes).
struct PeerHeaderCheck {
  const char* inbox;
  uint32_t flag;
  int peer;
  PairHeader want;  // peerPairHeader of this rank's plan
  int state;        // 0: not seen yet; 1: seen and equal to want; -1: seen and different (reported)

  MESHCOMM_DEVICE_INLINE bool judge(const PairHeader& got, const SpinContext& ctx) {
    state = got == want ? 1 : -1;
    if (state < 0 && got.bytes == want.bytes && got.expect != want.expect)
      reportMismatch(ctx, peer, want.expect, got.expect, DeviceOp::SendCountMismatch);
    else if (state < 0)
      reportMismatch(ctx, peer, want.bytes, got.bytes);
    return state > 0;
  }
  // One poll while waiting: false once the header is seen and differs.
  MESHCOMM_DEVICE_INLINE bool poll(const SpinContext& ctx) {
    if (state != 0) return state > 0;
    PairHeader got;
    return !tryReadPairHeader(inbox, flag, got) || judge(got, ctx);
  }
  // After the block's steps: spins for the header unless a wait saw it; true when it agrees.
  MESHCOMM_DEVICE_INLINE bool finish(const SpinContext& ctx) {
    if (state != 0) return state > 0;
    PairHeader got;
    return readPairHeader(inbox, flag, ctx, got) && judge(got, ctx);
  }
};

// The pairwise scratch pipeline (see the top of this file). Plan interface:
//   static constexpr bool kHeader;   exchange PairHeaders (the peer cannot know this rank's counts)
//   bool active(v, peer)             this pair exchanges in this call (both sides agree)
//   Stream send(v, peer), recv(v, peer)   byte streams (recv.bytes: what the peer sends if plans agree)
//   uint64_t sendSig(peer), recvSig(peer)  (kHeader) signatures that must agree
//   void selfCopy(v, part, nParts, tid, nt)   part `part` of `nParts` of the local copy, threads [0, nt)
// Each direction of a pair is a stream of pieces through the receiver's engine buffers (EngineStreams:
// persistent data/credit counters per lane). T = ceil(bytes / roundBytes) per direction, with one roundBytes
// for both directions of the pair, from the larger of its two counts: both sides compute the
// same pieces from their own plans.
//
// kHeader: the plans of the two sides may disagree (a user's counts), so the pair exchanges headers (above)
// but nothing waits for them: the pieces are cut by this rank's plan, and thread 0 checks the peer's header
// in its counter waits and at the end (PeerHeaderCheck). Until the header is seen a receiver may copy out
// pieces cut by its own counts; when they disagree with the sender's it writes nothing past its own count
// (the call fails with the mismatch on both sides, and the communicator is dead: pieces left in buffers do
// not matter). One header read per active block and call keeps the header halves safe: a block writes
// half h again two calls later, after its previous kernel read the peer's header of the call in between,
// which the peer wrote after its kernel that read half h had ended.
//
// Steps run as published steps (runPublishedSteps, engine_streams.cuh: a publisher warp does the
// system-scope releases while the compute warps run up to two steps ahead). Step s: thread 0 acquires the
// credit of my piece s and the peer's piece s - kCopyLag; the compute warps put my
// piece s, copy out the peer's piece s - kCopyLag and one slice of the local copy; the publisher publishes
// piece s to the peer's data counter and returns the copied-out buffer through the peer's credit counter.
// The peer publishes its piece s - kCopyLag while this block computes step s - 1, so the acquire at step s
// rarely waits. A sender runs at most K pieces ahead of its receiver: the credit of piece s needs the peer's
// step s - K + kCopyLag, and that step needs nothing from this block past its step s - K (no cycle). A
// failed spin (timeout/abort) ends the block's exchange (the communicator is dead).
constexpr uint64_t kCopyLag = 2;  // steps between a piece's put and its copy-out on the other side

// Thread 0's wait check of an active block: the peer's header (kHeader plans), else none.
template <class Plan, class Stream>
MESHCOMM_DEVICE_INLINE auto pairWaitCheck(const Plan& plan, const PacketRegion& hdr, const CommDeviceView& v,
                                          int peer, uint64_t epoch, const Stream& send, const Stream& recv) {
  if constexpr (Plan::kHeader) {
    return PeerHeaderCheck{hdr.inbox(v, peer, epoch & 1), llPacketFlag(epoch), peer,
                           peerPairHeader(send.bytes, recv.bytes, plan.sendSig(peer), plan.recvSig(peer)), 0};
  } else {
    return NoWaitCheck{};
  }
}

template <class Plan>
__global__ void __launch_bounds__(kEngineThreads)
    pairwiseKernel(CommDeviceView v, EngineStreams es, PacketRegion hdr, PairEpochs ep,
                   const __grid_constant__ Plan plan) {
  const BlockRole role = blockRole(v, es.blocksPerPeer);
  const bool active = role.peer >= 0 && plan.active(v, role.peer);
  const int B = es.blocksPerPeer;
  // Slices of the local copy per block: enough that each is >= kSelfSliceBytes, at most kSelfCopySlices.
  const uint32_t slices = static_cast<uint32_t>(minU(
      kSelfCopySlices, maxU(1, plan.selfBytes(v) / (static_cast<uint64_t>(gridDim.x) * kSelfSliceBytes))));
  const uint32_t selfPart = blockIdx.x * slices, selfParts = gridDim.x * slices;
  uint64_t epoch = 0;
  if constexpr (Plan::kHeader) {
    if (active) {
      epoch = ep.load(role.peer, role.c);
      if (role.c == 0 && threadIdx.x == 32) {
        writePairHeader(hdr.outbox(v, role.peer, epoch & 1),
                        ownPairHeader(plan.send(v, role.peer).bytes, plan.recv(v, role.peer).bytes,
                                      plan.sendSig(role.peer), plan.recvSig(role.peer)),
                        llPacketFlag(epoch));
      }
    }
  }
  if (!active) {
    for (uint32_t k = 0; k < slices; ++k) plan.selfCopy(v, selfPart + k, selfParts, threadIdx.x, blockDim.x);
    return;
  }

  const int peer = role.peer, c = role.c;
  const SpinContext ctx = device::channelRef(v, peer, 0).semaphore.spin;  // names this rank and the peer
  const auto send = plan.send(v, peer);
  const auto recv = plan.recv(v, peer);
  auto check = pairWaitCheck(plan, hdr, v, peer, epoch, send, recv);  // thread 0's
  // Both directions in rounds of the same size, from this rank's plan (the peer's cuts them alike).
  const uint64_t round =
      es.pieceCap(maxU(send.bytes, recv.bytes), kPairwiseRounds) * static_cast<uint64_t>(B);
  const uint64_t Ts = divUp(send.bytes, round), Tr = divUp(recv.bytes, round);
  const uint64_t steps = Tr > 0 ? maxU(Ts, Tr + kCopyLag) : Ts;

  uint64_t* sentWord = es.sent + static_cast<uint64_t>(peer) * kEngineLanes + c;
  uint64_t* consumedWord = es.consumed + static_cast<uint64_t>(peer) * kEngineLanes + c;
  const uint64_t sent0 = *sentWord, consumed0 = *consumedWord;  // written by earlier launches only
  uint32_t selfDone = 0;
  // Step s copies out the peer's piece j = s - kCopyLag (when it exists).
  auto copiesOut = [&](uint64_t s, uint64_t& j) {
    j = s - kCopyLag;
    return s >= kCopyLag && j < Tr;
  };
  bool done = runPublishedSteps(
      steps,
      [&](uint64_t s) {
        bool good = s >= Ts || awaitCredit(es, v, peer, c, sent0 + s, ctx, check);
        uint64_t j;
        if (good && copiesOut(s, j)) good = awaitPiece(es, v, peer, c, consumed0 + j, ctx, check);
        return good;
      },
      [&](uint64_t s, uint32_t tid, uint32_t nt) {
        if (s < Ts) {
          const Piece p = roundPiece(send.bytes, s, round, B, c);
          if (p.len) send.toScratch(es.buffer(v, peer, v.rank, c, sent0 + s), p.off, p.len, tid, nt);
        }
        uint64_t j;
        if (copiesOut(s, j)) {
          const Piece p = roundPiece(recv.bytes, j, round, B, c);
          if (p.len) recv.fromScratch(es.buffer(v, v.rank, peer, c, consumed0 + j), p.off, p.len, tid, nt);
        }
        if (selfDone < slices) plan.selfCopy(v, selfPart + selfDone++, selfParts, tid, nt);
      },
      [&](uint64_t s) {
        if (s < Ts) publishPiece(es, v, peer, c);
        uint64_t j;
        if (copiesOut(s, j)) releasePiece(es, v, peer, c);
      });
  // kHeader: the peer's header, unless a wait saw it (it overlaps the publisher's last release).
  if constexpr (Plan::kHeader) {
    if (done && threadIdx.x == 0) done = check.finish(ctx);
  }
  if (done && threadIdx.x == 0) {
    *sentWord = sent0 + Ts;
    *consumedWord = consumed0 + Tr;
  }
  const uint32_t computeThreads = publishedStepComputeThreads();
  if (threadIdx.x < computeThreads) {
    for (; selfDone < slices; ++selfDone)
      plan.selfCopy(v, selfPart + selfDone, selfParts, threadIdx.x, computeThreads);
  }
  if constexpr (Plan::kHeader) {
    __syncthreads();  // every thread has read its epoch word (advanced next), even with no steps
    ep.advance(peer, c, B, epoch, threadIdx.x, blockDim.x);  // own words only
  }
}

#endif

// One launch of the LL exchange (ll_exchange.cu): block (peer p, index c) of `grid` writes its share of the
// `bytes` for p (input + p*srcStride) as packets into p's region slot [rank], does its share of the local
// copy (selfBytes from input + rank*srcStride to output + rank*dstStride; 0: none), then unpacks its share
// of p's packets into output + p*dstStride. allgather: srcStride 0, dstStride bytes; alltoall: both bytes.
// In place (alltoall: input == output) a block reads its input share before it overwrites it
// (__syncthreads between its puts and its gets; shares of different blocks are disjoint). streamHeader:
// the pairs speak the LL stream protocol of ll_stream.cu (header packets {bytes, signature of one
// operation}, then the packets): an even exchange of sendrecv_ll, whose peers may run llStreamKernel.
struct LLExchange {
  const char* input = nullptr;
  char* output = nullptr;
  uint64_t bytes = 0, srcStride = 0, dstStride = 0, selfBytes = 0;
  bool streamHeader = false;
};
void launchLLExchange(const CommDeviceView& v, const PacketRegion& r, const PairEpochs& ep,
                      const LLGrid& grid, int threads, const LLExchange& x, cudaStream_t stream);

// ---- host side
// ----------------------------------------------------------------------------------------------
inline std::string commonReason(const CommTopology& topo, const CommResources& resources) {
  if (!topo.allPeersIpc) return "needs every peer reachable by CUDA IPC (MemoryChannels)";
  return {};
}

inline int normalizeThreads(int requested, int def, int minThreads, int maxThreads) {
  int t = requested > 0 ? requested : def;
  t = std::max(minThreads, std::min(maxThreads, t));
  return (t + 31) / 32 * 32;
}

struct EngineShape {
  int grid;
  int threads;
  int blocksPerPeer;
};

// Blocks per peer: config.nBlocks / nPeers if given, else SMs / nPeers; at most pairwiseLanes(n).
inline EngineShape engineShape(const CommResources& resources, const LaunchConfig& config) {
  const CommDeviceView& v = resources.view();
  const CommTopology& topo = resources.topology();
  const int nPeers = v.nRanks - 1;
  EngineShape s{};
  s.threads = normalizeThreads(config.nThreadsPerBlock, kEngineThreads, 64, kEngineThreads);
  int B = 1;
  if (nPeers > 0) {
    const int want = config.nBlocks > 0 ? config.nBlocks / nPeers : std::max(1, topo.smCount) / nPeers;
    B = std::max(1, std::min(want, pairwiseLanes(v.nRanks)));
  }
  s.grid = std::max(1, nPeers * B);
  s.blocksPerPeer = B;
  return s;
}

// Base of the pairwise-engine algorithms: the shared engine streams, epoch words and (kHeader plans) a header
// packet region are set up at initialize(); launchEngine() launches pairwiseKernel<Plan>.
class EngineAlgorithm : public Algorithm {
 public:
  EngineAlgorithm(std::string name, Collective collective, bool needsHeader)
      : name_(std::move(name)), collective_(collective), needsHeader_(needsHeader) {}
  std::string name() const override { return name_; }
  Collective collective() const override { return collective_; }

  void initialize(CommResources& resources) override {
    resources_ = &resources;
    const CommDeviceView& v = resources.view();
    streams_ = sharedEngineStreams(resources);
    if (needsHeader_ && v.nRanks > 1) {
      epochs_.stride = kEngineLanes;
      epochs_.words = resources.allocateDeviceWords(static_cast<size_t>(v.nRanks) * epochs_.stride);
      header_ = reservePacketRegion(resources, kHeaderBytes);
    }
  }

  // (n-1) * min(pairwiseLanes(n), SMs / (n-1)) blocks of kEngineThreads; the same on every rank. Every rank
  // must launch the same config for a call (both sides of a pair cut the streams by the blocks per peer).
  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    if (resources_ == nullptr) return {};
    const EngineShape s = engineShape(*resources_, {});
    return {s.grid, s.threads};
  }

 protected:
  // Reasons every engine algorithm shares (collective-specific ones are added by the subclass).
  std::string engineReason(const CommTopology& topo) const {
    if (resources_ == nullptr) return "not initialized";
    std::string r = commonReason(topo, *resources_);
    if (!r.empty()) return r;
    if (topo.nRanks > 1 && streams_.pieceMax == 0)
      return "the packet buffer has no room for the engine's stream buffers (MESHCOMM_PACKET_BYTES)";
    return {};
  }

  const EngineStreams& engineStreams() const { return streams_; }

#if defined(__CUDACC__)
  template <class Plan>
  void launchEngine(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
                    const Plan& plan) {
    const EngineShape s = engineShape(resources, config);
    MESHCOMM_REQUIRE(resources.view().nRanks < 2 || streams_.pieceMax > 0, "rank ", resources.view().rank,
                     ": ", name_, ": no engine stream buffers (MESHCOMM_PACKET_BYTES too small)");
    EngineStreams streams = streams_;
    streams.blocksPerPeer = s.blocksPerPeer;
    pairwiseKernel<Plan>
        <<<s.grid, s.threads, 0, args.stream>>>(resources.view(), streams, header_, epochs_, plan);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }
#endif

 private:
  std::string name_;
  Collective collective_;
  bool needsHeader_;
  const CommResources* resources_ = nullptr;
  EngineStreams streams_;
  PacketRegion header_;
  PairEpochs epochs_;
};

// Base of allgather_ll and alltoall_ll: one packet region [2][nRanks][slot] and epoch words, reserved at
// initialize(); supports calls whose bytes per peer fit a slot.
class LLExchangeAlgorithm : public Algorithm {
 public:
  // srcStrided: input chunk p goes to peer p (alltoall); otherwise the whole input goes to every peer.
  LLExchangeAlgorithm(std::string name, Collective collective, bool srcStrided)
      : name_(std::move(name)), collective_(collective), srcStrided_(srcStrided) {}
  std::string name() const override { return name_; }
  Collective collective() const override { return collective_; }

  void initialize(CommResources& resources) override {
    LLRegionState st = reserveLLRegion(resources, kLLRegionBudgets);
    region_ = st.region;
    epochs_ = st.epochs;
    maxBytesPerPeer_ = st.maxBytesPerPeer;
  }

  // Largest count*dtypeSize this algorithm takes on this communicator (0 before initialize or if the
  // packet buffer had no room).
  uint64_t maxBytesPerPeer() const { return maxBytesPerPeer_; }

  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return llUnsupportedReason(args, topo, maxBytesPerPeer_);
  }

  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override {
    const uint64_t bytes = static_cast<uint64_t>(args.count) * dataTypeSize(args.dtype);
    return {llBlocksPerPeer(bytes, kLLThreads, topo) * std::max(1, topo.nRanks - 1), kLLThreads};
  }

  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void* context) override;

 private:
  std::string name_;
  Collective collective_;
  bool srcStrided_;
  PacketRegion region_;
  PairEpochs epochs_;
  uint64_t maxBytesPerPeer_ = 0;
};

// An engine algorithm whose plan is RootedPlanBase's fields (input, output, bytes, root) plus device code.
template <class Plan>
class SimpleEngineAlgorithm : public EngineAlgorithm {
 public:
  SimpleEngineAlgorithm(std::string name, Collective collective)
      : EngineAlgorithm(std::move(name), collective, Plan::kHeader) {}
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    return engineReason(topo);
  }
#if defined(__CUDACC__)
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const Plan plan = planFromArgs<Plan>(args);
    if (plan.bytes == 0) return;  // equal on every rank
    this->launchEngine(resources, args, config, plan);
  }
#endif
};

}  // namespace meshcomm::movement
