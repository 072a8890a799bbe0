// Strided groups: SendRecv groups in which this rank has at most one send to and at most one receive from
// each rank, every send of one byte count and every receive of one byte count, with oneself either both or
// neither (then of equal counts), and on each side the buffers at base + p * stride for peer p: an alltoall
// posted as grouped ncclSend/ncclRecv (nccl-tests' alltoall), gather and scatter as nccl-tests posts them,
// a ring step (send to next, receive from previous), a lone send or receive. sendrecv_ll and
// sendrecv_scratch run such a group through the same kernels (LL stream, pairwise engine) and wire protocol
// as any other group (header packets, stream packets, pair epochs), with a plan whose addresses and counts
// are arithmetic on a few scalars (StridedPlan) instead of per-peer segment lists in the kernel parameters:
// the lists cost a dependent constant-cache load at the head of every phase of the kernel (send, self copy,
// receive). The wire protocol being the same, each rank decides alone (a peer whose own group is not strided
// runs the segment lists against it); docs/collectives.md, "LL streams", "Strided groups". The host part
// (stridedGroup) builds without nvcc.
#pragma once

#include <cstdint>

#include "collectives/algorithms/sendrecv_plan.cuh"

namespace meshcomm::movement {

// The scalars of a strided group. Chunk of peer p on each side: base + p * stride (modulo 2^64: strides
// may be negative; the address of a peer without an operation may lie outside every allocation and is
// never used).
struct StridedGroup {
  uint32_t sendPeers = 0, recvPeers = 0;  // bit p: one send to p / one receive from p (oneself included)
  uint64_t sendBytes = 0, recvBytes = 0;  // of every send / every receive
  uint64_t sendBase = 0, sendStride = 0;
  uint64_t recvBase = 0, recvStride = 0;
};

// Fits base + p * stride through the addresses of the segments `first[p]` of every p in `peers` (a bit
// mask; pure). No peer: base = stride = 0. False when they are not on one line with an integer stride.
inline bool fitStride(const Seg* segs, const uint16_t* first, uint32_t peers, int n, uint64_t& base,
                      uint64_t& stride) {
  int p0 = -1, p1 = -1;
  for (int p = 0; p < n && p1 < 0; ++p) {
    if (!((peers >> p) & 1u)) continue;
    (p0 < 0 ? p0 : p1) = p;
  }
  base = stride = 0;
  if (p0 < 0) return true;
  const auto at = [&](int p) { return reinterpret_cast<uint64_t>(segs[first[p]].ptr); };
  if (p1 >= 0) {
    const int64_t diff = static_cast<int64_t>(at(p1) - at(p0));
    if (diff % (p1 - p0) != 0) return false;
    stride = static_cast<uint64_t>(diff / (p1 - p0));
  }
  base = at(p0) - static_cast<uint64_t>(p0) * stride;
  for (int p = 0; p < n; ++p)
    if (((peers >> p) & 1u) && at(p) != base + static_cast<uint64_t>(p) * stride) return false;
  return true;
}

// Whether rank `rank`'s group (its plan on n ranks) is strided; fills g when it is. Pure.
inline bool stridedGroup(const SendRecvPlan& plan, int rank, int n, StridedGroup& g) {
  if (n < 2 || n > kMaxP2PRanks) return false;
  // One direction with `peer` (`ops` operations, `bytes` in all): at most one operation, and every operation
  // of that direction of one count (`count`); `peers` collects the peers that have one.
  const auto take = [](int ops, uint64_t bytes, int peer, uint32_t& peers, uint64_t& count) {
    if (ops > 1 || (ops == 1 && peers != 0 && bytes != count)) return false;
    if (ops == 1) {
      count = bytes;
      peers |= 1u << peer;
    }
    return true;
  };
  StridedGroup s;
  for (int p = 0; p < n; ++p) {
    if (!take(plan.sendStart[p + 1] - plan.sendStart[p], plan.sendBytes[p], p, s.sendPeers, s.sendBytes) ||
        !take(plan.recvStart[p + 1] - plan.recvStart[p], plan.recvBytes[p], p, s.recvPeers, s.recvBytes))
      return false;
  }
  // Oneself: both a send and a receive of one count (the segment lists report the other cases), or neither.
  const uint32_t me = 1u << rank;
  if ((s.sendPeers & me) != (s.recvPeers & me)) return false;
  if ((s.sendPeers & me) && s.sendBytes != s.recvBytes) return false;
  if (!fitStride(plan.segs, plan.sendStart, s.sendPeers, n, s.sendBase, s.sendStride) ||
      !fitStride(plan.segs, plan.recvStart, s.recvPeers, n, s.recvBase, s.recvStride))
    return false;
  g = s;
  return true;
}

// The peer mask of every rank of n (n <= 32, the width of the masks). Pure.
inline uint32_t allRanksMask(int n) {
  return n >= 32 ? ~0u : (1u << n) - 1u;
}

// An even exchange: this rank sends b > 0 bytes to and receives b bytes from every other rank (and either
// both or neither with itself), as an alltoall posted as grouped sends and receives (nccl-tests' alltoall)
// or a two-rank sendrecv. Returns b, or 0 when g is not one. Pure. Every pair of an even exchange has one
// operation each way of b bytes, so sendrecv_ll runs it, when b fits its LL capacity, through the LL
// exchange kernel speaking the stream protocol (LLExchange::streamHeader) instead of llStreamKernel.
inline uint64_t evenExchangeBytes(const StridedGroup& g, int rank, int n) {
  const uint32_t others = allRanksMask(n) & ~(1u << rank);
  if (n < 2 || g.sendPeers != g.recvPeers || (g.sendPeers & others) != others || g.sendBytes != g.recvBytes)
    return 0;
  return g.sendBytes;
}

// The plan of a strided group (the interface of SendRecvPlan that llStreamKernel and pairwiseKernel use).
// send, recv, sendSig, recvSig: pure (scalars of the by-value plan). A peer without an operation in a
// direction has an empty stream and the seed signature there; with one, the signature SendRecvPlan computes
// for a single operation of that size, so peers running segment lists agree with it.
struct StridedPlan : PlanBase {
  static constexpr bool kHeader = true;
  StridedGroup g;
  uint64_t sendSig1 = kSigSeed, recvSig1 = kSigSeed;  // signatures of one send / one receive

  StridedPlan() = default;
  explicit StridedPlan(const StridedGroup& group)
      : g(group),
        sendSig1(mixSize(kSigSeed, group.sendBytes)),
        recvSig1(mixSize(kSigSeed, group.recvBytes)) {}

  MESHCOMM_HOST_DEVICE_INLINE bool sends(int p) const { return (g.sendPeers >> p) & 1u; }
  MESHCOMM_HOST_DEVICE_INLINE bool receives(int p) const { return (g.recvPeers >> p) & 1u; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t sendSig(int p) const { return sends(p) ? sendSig1 : kSigSeed; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t recvSig(int p) const { return receives(p) ? recvSig1 : kSigSeed; }
#if defined(__CUDACC__)
  // active, selfBytes (the engine's view, pairwiseKernel): pure, as SendRecvPlan's for the same group.
  __device__ bool active(const CommDeviceView&, int p) const {
    return sends(p) || receives(p);
  }
  __device__ uint64_t selfBytes(const CommDeviceView& v) const {
    return sends(v.rank) ? g.sendBytes : 0;
  }
  __device__ ContigStream send(const CommDeviceView&, int p) const {
    return {reinterpret_cast<char*>(g.sendBase + static_cast<uint64_t>(p) * g.sendStride),
            sends(p) ? g.sendBytes : 0};
  }
  __device__ ContigStream recv(const CommDeviceView&, int p) const {
    return {reinterpret_cast<char*>(g.recvBase + static_cast<uint64_t>(p) * g.recvStride),
            receives(p) ? g.recvBytes : 0};
  }
  // This block's share of the send to oneself -> receive from oneself (weak loads and stores, local; both
  // sides have one count, so there is no mismatch to report).
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (sends(v.rank))
      copyShare(recv(v, v.rank).ptr, send(v, v.rank).ptr, g.sendBytes, part, nParts, tid, nt);
  }
#endif
};

// A gather (every rank sends `bytes` of input to the root; the root receives chunk p at output + p * bytes
// from every p, itself included) or a scatter (the root sends chunk p at input + p * bytes to every p; every
// rank receives `bytes` into output) as the strided group of rank `rank`: the group nccl-tests posts for the
// same collective as grouped sends and receives (stridedGroup finds these scalars in it), which
// gather_stream and scatter_stream run with sendrecv_ll's kernels. A direction with one peer has stride 0.
// Pure.
enum class RootedDirection : uint8_t { Gather, Scatter };
inline StridedGroup rootedGroup(RootedDirection d, int rank, int n, int root, const void* input, void* output,
                                uint64_t bytes) {
  const uint32_t everyone = allRanksMask(n);
  const uint32_t theRoot = 1u << root;
  const auto in = reinterpret_cast<uint64_t>(input);
  const auto out = reinterpret_cast<uint64_t>(output);
  const bool isRoot = rank == root;
  StridedGroup g;
  if (d == RootedDirection::Gather) {
    g.sendPeers = theRoot;
    g.sendBytes = bytes;
    g.sendBase = in;
    if (isRoot) g.recvPeers = everyone, g.recvBytes = bytes, g.recvBase = out, g.recvStride = bytes;
  } else {
    g.recvPeers = theRoot;
    g.recvBytes = bytes;
    g.recvBase = out;
    if (isRoot) g.sendPeers = everyone, g.sendBytes = bytes, g.sendBase = in, g.sendStride = bytes;
  }
  return g;
}

// Calls run(plan) with the StridedPlan of rank `rank`'s group when it is strided, else with the segment
// lists themselves: both speak the same wire protocol (each rank decides alone), the strided one with a
// few scalars of kernel parameters instead of the lists (~3 KiB) and no dependent loads of them.
template <class Run>
void runWithGroupPlan(const SendRecvPlan& plan, int rank, int n, Run&& run) {
  StridedGroup g;
  if (stridedGroup(plan, rank, n, g))
    run(StridedPlan(g));
  else
    run(plan);
}

}  // namespace meshcomm::movement
