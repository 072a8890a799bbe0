// Host-side decisions of the LL stream algorithms (sendrecv_ll, alltoallv_ll, gather_stream, scatter_stream;
// kernels in ll_stream.cu, design in docs/collectives.md "LL streams"): which pairs of a call travel as LL
// packets and which go through the pairwise engine (pairwiseKernel), the packet slot of a pair, and the
// kernels a call launches.
// Pure functions of values every rank computes alike (unit-tested in tests/unit/test_ll_stream.cc).
//
// Per-pair choice: pair (rank, p) runs as LL iff max(bytes this rank sends to p, bytes it receives from p)
// <= the LL capacity. The peer evaluates max(its send to rank, its receive from rank) = the same two numbers
// when the program is correct, so both sides pick the same path without any exchange. When they disagree
// (a count mismatch across the threshold) one side waits for LL packets and the other for the engine: both
// time out (nothing is written out of bounds); mismatches on the same side of the threshold are reported
// as count mismatches by the receiver, as in the engine.
#pragma once

#include <algorithm>
#include <cstdint>

#include "collectives/algorithms/alltoall_plan.cuh"
#include "collectives/algorithms/movement_common.cuh"
#include "collectives/algorithms/sendrecv_plan.cuh"
#include "collectives/algorithms/strided_group.cuh"

namespace meshcomm::movement {

constexpr int kLLStreamMaxRanks = 32;  // pair masks are 32-bit (= kMaxP2PRanks = kMaxHostCountRanks)
static_assert(kLLStreamMaxRanks >= kMaxP2PRanks && kLLStreamMaxRanks >= kMaxHostCountRanks);
// LL capacities (bytes one direction of a pair may carry per call) tried at initialize(), largest first:
// the first whose region [2][n][slot] the packet buffer still holds is the per-pair threshold. 512 KiB keeps
// a 1 MB alltoallv of the benchmark's uneven split (pairs up to 420 KB at n = 4) in one LL launch instead of
// three (LL send, engine, LL receive: 0.82x NCCL with a 256 KiB threshold on 4x H200); alltoall_ll is as fast
// as the engine at 256 KiB per peer. The region then takes 8 MiB at n = 4, 16 MiB at n = 8.
constexpr uint64_t kLLStreamCapacities[] = {512u << 10, 256u << 10, 128u << 10,
                                            64u << 10,  32u << 10,  16u << 10};
constexpr uint64_t kLLStreamHeaderPackets = 2;             // {bytes, signature}, as writeHeader/readHeader
constexpr uint64_t kLLStreamSelfBytesPerBlock = 64 << 10;  // self copy: about this much per block

// ---- packets of a byte stream ----------------------------------------------------------------------------
// Packet k of a stream carries stream bytes [8k, 8k+8) (zero-padded past the end). A stream is a list of
// segments (sendrecv: the operations with one peer, in order; alltoallv: one segment).

// Block c's packets [pk0, pk1) of a stream of `bytes` (packets split evenly over B blocks). Pure arithmetic.
struct PacketRange {
  uint64_t pk0, pk1;
};
MESHCOMM_HOST_DEVICE_INLINE PacketRange llPacketRange(uint64_t bytes, int B, int c) {
  const uint64_t nPackets = divUp(bytes, LL16Packet::kPayloadBytes);
  const uint64_t per = divUp(nPackets, static_cast<uint64_t>(B));
  const uint64_t pk0 = minU(nPackets, per * static_cast<uint64_t>(c));
  return {pk0, minU(nPackets, pk0 + per)};
}

// Walks packets [pk0, pk1) of the stream `segs[0..n)`, counting only stream bytes below `limit`:
// whole(i, lo, kLo, kHi) for the packets [kLo, kHi) that lie inside segment i (which starts at stream
// offset lo), and cut(i, lo, k) for each packet that a segment end or `limit` cuts, once, with i the
// first segment holding bytes of it (lo <= 8k). Every packet of the range holding a byte below `limit`
// is visited exactly once. A callback returning false stops the walk (walkPackets returns false). No memory
// access of its own (reads the segment list; the callbacks do the data loads and stores).
template <class Whole, class Cut>
MESHCOMM_HOST_DEVICE_INLINE bool walkPackets(const Seg* segs, int n, uint64_t limit, uint64_t pk0,
                                             uint64_t pk1, Whole&& whole, Cut&& cut) {
  constexpr uint64_t kPk = LL16Packet::kPayloadBytes;
  const uint64_t end = minU(limit, pk1 * kPk);
  uint64_t base = 0;
  for (int i = 0; i < n && base < end; ++i) {
    const uint64_t lo = base, hi = minU(base + segs[i].bytes, limit);
    base += segs[i].bytes;
    if (hi <= pk0 * kPk) continue;
    const uint64_t kLo = maxU(divUp(lo, kPk), pk0), kHi = minU(hi / kPk, pk1);
    if (kLo < kHi && !whole(i, lo, kLo, kHi)) return false;
    // The packet holding `hi` is cut there; it belongs to its first cut (lo is not a cut inside it).
    const uint64_t k = hi / kPk;
    const bool firstCut = hi % kPk != 0 && !(lo / kPk == k && lo % kPk != 0);
    if (firstCut && k >= pk0 && k < pk1 && !cut(i, lo, k)) return false;
  }
  return true;
}

// Payload words of packet k (stream bytes [8k, 8k+8), zero past the stream's end), read byte by byte from
// segments i.. (segment i starts at stream offset base <= 8k). One thread; weak loads.
MESHCOMM_HOST_DEVICE_INLINE void gatherPacket(const Seg* segs, int n, int i, uint64_t base, uint64_t k,
                                              uint32_t& v1, uint32_t& v2) {
  constexpr uint64_t kPk = LL16Packet::kPayloadBytes;
  v1 = v2 = 0;
  uint64_t pos = k * kPk;
  for (uint32_t t = 0; t < kPk && i < n;) {
    const uint64_t segEnd = base + segs[i].bytes;
    if (pos < segEnd) {
      const uint32_t byte = static_cast<unsigned char>(segs[i].ptr[pos - base]);
      if (t < 4)
        v1 |= byte << (8 * t);
      else
        v2 |= byte << (8 * (t - 4));
      ++t;
      ++pos;
    } else {
      base = segEnd;
      ++i;
    }
  }
}

// Stores packet k's payload words into stream bytes [8k, min(8k+8, limit)) of segments i.. (segment i starts
// at stream offset base <= 8k). One thread; weak stores.
MESHCOMM_HOST_DEVICE_INLINE void scatterPacket(const Seg* segs, int n, int i, uint64_t base, uint64_t k,
                                               uint64_t limit, uint32_t v1, uint32_t v2) {
  constexpr uint64_t kPk = LL16Packet::kPayloadBytes;
  uint64_t pos = k * kPk;
  const uint64_t stop = minU(pos + kPk, limit);
  while (pos < stop && i < n) {
    const uint64_t segEnd = base + segs[i].bytes;
    if (pos < segEnd) {
      const uint32_t t = static_cast<uint32_t>(pos - k * kPk);
      segs[i].ptr[pos - base] = static_cast<char>((t < 4 ? v1 >> (8 * t) : v2 >> (8 * (t - 4))) & 0xFF);
      ++pos;
    } else {
      base = segEnd;
      ++i;
    }
  }
}

// Parts of an LL stream launch (LLStreamGrid::parts).
enum LLStreamPart : uint32_t { kPartSend = 1, kPartRecv = 2, kPartSelf = 4 };

// Packet bytes of one sender slot: the header packets, then `capacity` payload bytes as LL16 packets.
inline uint64_t llStreamSlotBytes(uint64_t capacity) {
  return (kLLStreamHeaderPackets + divUp(capacity, LL16Packet::kPayloadBytes)) * sizeof(LL16Packet);
}

// What this rank knows of one call, per peer (bytes; entries of inactive peers are ignored).
struct PairBytes {
  uint64_t send[kLLStreamMaxRanks] = {};
  uint64_t recv[kLLStreamMaxRanks] = {};
  uint32_t active = 0;     // bit p (p != rank): this rank exchanges with p in this call
  bool self = false;       // the call has operations with oneself (copied locally)
  uint64_t selfBytes = 0;  // bytes of that copy
};

inline PairBytes pairBytes(const SendRecvPlan& plan, int rank, int n) {
  PairBytes b;
  for (int p = 0; p < n; ++p) {
    if (p == rank || !plan.hasOps(p)) continue;
    b.active |= 1u << p;
    b.send[p] = plan.sendBytes[p];
    b.recv[p] = plan.recvBytes[p];
  }
  b.self = plan.hasOps(rank);
  b.selfBytes = b.self ? std::min(plan.sendBytes[rank], plan.recvBytes[rank]) : 0;
  return b;
}

// Of a strided group (the same as pairBytes of the segment lists it stands for).
inline PairBytes pairBytes(const StridedGroup& g, int rank, int n) {
  PairBytes b;
  for (int p = 0; p < n; ++p) {
    const bool sends = (g.sendPeers >> p) & 1u, receives = (g.recvPeers >> p) & 1u;
    if (p == rank || !(sends || receives)) continue;
    b.active |= 1u << p;
    b.send[p] = sends ? g.sendBytes : 0;
    b.recv[p] = receives ? g.recvBytes : 0;
  }
  b.self = ((g.sendPeers | g.recvPeers) >> rank) & 1u;
  b.selfBytes = b.self ? std::min(g.sendBytes, g.recvBytes) : 0;
  return b;
}

inline PairBytes pairBytes(const HostCounts& counts, int rank, int n) {
  PairBytes b;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    b.active |= 1u << p;  // every pair of an alltoallv exchanges (at least its header)
    b.send[p] = counts.send[p];
    b.recv[p] = counts.recv[p];
  }
  b.self = true;  // the self chunk is always checked (and copied when non-empty)
  b.selfBytes = std::min(counts.send[rank], counts.recv[rank]);
  return b;
}

struct PairSplit {
  uint32_t llPairs = 0;       // bit p: pair (rank, p) runs in the LL kernels
  uint32_t scratchPairs = 0;  // bit p: pair (rank, p) runs in the scratch pipeline
  int nLL = 0;
  int llPeers[kLLStreamMaxRanks] = {};  // the LL pairs' peers in the order rank+1, rank+2, ...
  uint64_t maxLLBytes = 0;              // largest direction of an LL pair
};

// Splits the active pairs: LL iff max(send, recv) <= llMaxBytes (llMaxBytes 0: no LL region, all scratch).
inline PairSplit splitPairs(int rank, int n, const PairBytes& b, uint64_t llMaxBytes) {
  PairSplit s;
  for (int i = 1; i < n; ++i) {
    const int p = (rank + i) % n;
    if (!((b.active >> p) & 1u)) continue;
    const uint64_t larger = std::max(b.send[p], b.recv[p]);
    if (llMaxBytes > 0 && larger <= llMaxBytes) {
      s.llPairs |= 1u << p;
      s.llPeers[s.nLL++] = p;
      s.maxLLBytes = std::max(s.maxLLBytes, larger);
    } else {
      s.scratchPairs |= 1u << p;
    }
  }
  return s;
}

// The kernels of one call, in stream order: an LL kernel with parts `before`, the scratch pipeline over
// the scratch pairs, an LL kernel with parts `after` (0 / false: not launched). With scratch pairs the LL
// pairs are split around the pipeline (send first, receive last) so that no pair waits on another: the
// send half never waits, the pipeline waits only for its own pairs, the receive half only for packets the
// peers' send halves wrote (docs/collectives.md, "LL streams"). The self copy runs in the first launch.
struct StreamLaunches {
  uint32_t before = 0;
  bool engine = false;
  bool engineSelf = false;  // the pipeline does the self copy
  uint32_t after = 0;
};

inline StreamLaunches planLaunches(const PairSplit& s, bool self) {
  StreamLaunches l;
  const uint32_t selfPart = self ? kPartSelf : 0u;
  if (s.scratchPairs == 0) {
    l.before = (s.nLL > 0 ? kPartSend | kPartRecv : 0u) | selfPart;
    return l;
  }
  l.engine = true;
  if (s.nLL == 0) {
    l.engineSelf = self;
    return l;
  }
  l.before = kPartSend | selfPart;
  l.after = kPartRecv;
  return l;
}

// Grid of the LL kernels of a call: blocksPerPeer for every LL pair (llBlocksPerPeer of its largest
// direction; any count works on either side: packet positions depend on stream offsets only), and enough
// blocks for the self copy.
struct LLStreamShape {
  int blocksPerPeer = 1;
  int pairBlocks = 0;  // nLL * blocksPerPeer
  int selfBlocks = 0;
};

inline LLStreamShape llStreamShape(const PairSplit& s, uint64_t selfBytes, int threads,
                                   const CommTopology& topo) {
  LLStreamShape g;
  if (s.nLL > 0) g.blocksPerPeer = llBlocksPerPeer(s.maxLLBytes, threads, topo);
  g.pairBlocks = s.nLL * g.blocksPerPeer;
  const uint64_t maxSelf = static_cast<uint64_t>(std::max(1, topo.smCount));
  g.selfBlocks = static_cast<int>(
      std::min(maxSelf, std::max<uint64_t>(1, divUp(selfBytes, kLLStreamSelfBytesPerBlock))));
  return g;
}

// Blocks of one LL launch with `parts` (>= 1).
inline int llStreamBlocks(const LLStreamShape& g, uint32_t parts) {
  int b = 1;
  if (parts & (kPartSend | kPartRecv)) b = std::max(b, g.pairBlocks);
  if (parts & kPartSelf) b = std::max(b, g.selfBlocks);
  return b;
}

}  // namespace meshcomm::movement
