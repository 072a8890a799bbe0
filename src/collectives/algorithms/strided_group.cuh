// Strided groups: SendRecv groups shaped like an alltoall (nccl-tests' alltoall, an alltoall written as
// grouped ncclSend/ncclRecv): with every other rank exactly one send and one receive, all of the same byte
// count, optionally also one send and one receive with oneself, and on each side the buffers at
// base + p * stride for peer p. sendrecv_ll runs such a group through the same LL stream kernel and wire
// protocol as any other group (header packets, stream packets, pair epochs), with a plan whose addresses are
// arithmetic on a few scalars (StridedPlan) instead of per-peer segment lists in the kernel parameters:
// the lists cost a dependent constant-cache load at the head of every phase of the kernel (send, self copy,
// receive). The wire protocol being the same, each rank decides alone (a peer whose own group is not strided
// runs the segment lists against it); docs/collectives.md, "LL streams", "Strided groups".
// The host part (stridedGroup) builds without nvcc (unit tests).
#pragma once

#include <cstdint>

#include "collectives/algorithms/sendrecv_plan.cuh"

namespace meshcomm::movement {

// The scalars of a strided group. Chunk of peer p on each side: base + p * stride (modulo 2^64: strides
// may be negative; the base of an unused peer index may lie outside every allocation and is never used).
struct StridedGroup {
  uint64_t bytes = 0;  // of every operation
  uint64_t sendBase = 0, sendStride = 0;
  uint64_t recvBase = 0, recvStride = 0;
  bool self = false;  // the group has one send and one receive with oneself (copied locally)
};

// Fits base + p * stride through the addresses of the segments `first[p]` of every p in `peers` (a bit
// mask; pure). At least one peer. False when they are not on one line with an integer stride.
inline bool fitStride(const Seg* segs, const uint16_t* first, uint32_t peers, int n, uint64_t& base,
                      uint64_t& stride) {
  int p0 = -1, p1 = -1;
  for (int p = 0; p < n && p1 < 0; ++p) {
    if (!((peers >> p) & 1u)) continue;
    (p0 < 0 ? p0 : p1) = p;
  }
  const auto at = [&](int p) { return reinterpret_cast<uint64_t>(segs[first[p]].ptr); };
  stride = 0;
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
  const auto ops = [](const uint16_t* start, int p) { return start[p + 1] - start[p]; };
  const bool self = ops(plan.sendStart, rank) == 1 && ops(plan.recvStart, rank) == 1;
  if (!self && (ops(plan.sendStart, rank) != 0 || ops(plan.recvStart, rank) != 0)) return false;
  const uint64_t bytes = plan.sendBytes[(rank + 1) % n];
  uint32_t peers = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank && !self) continue;
    if (ops(plan.sendStart, p) != 1 || ops(plan.recvStart, p) != 1) return false;
    if (plan.sendBytes[p] != bytes || plan.recvBytes[p] != bytes) return false;
    peers |= 1u << p;
  }
  StridedGroup s;
  s.bytes = bytes;
  s.self = self;
  if (!fitStride(plan.segs, plan.sendStart, peers, n, s.sendBase, s.sendStride) ||
      !fitStride(plan.segs, plan.recvStart, peers, n, s.recvBase, s.recvStride))
    return false;
  g = s;
  return true;
}

// The LL stream plan of a strided group (the interface of SendRecvPlan that llStreamKernel uses).
// send, recv, sendSig, recvSig: pure (scalars of the by-value plan). The signature is the one
// SendRecvPlan computes for a single operation of `bytes`, so peers running segment lists agree with it.
struct StridedPlan : PlanBase {
  static constexpr bool kHeader = true;
  StridedGroup g;
  uint64_t sig = mixSize(kSigSeed, 0);

  StridedPlan() = default;
  explicit StridedPlan(const StridedGroup& group) : g(group), sig(mixSize(kSigSeed, group.bytes)) {}

#if defined(__CUDACC__)
  __device__ ContigStream send(const CommDeviceView&, int p) const {
    return {reinterpret_cast<char*>(g.sendBase + static_cast<uint64_t>(p) * g.sendStride), g.bytes};
  }
  __device__ ContigStream recv(const CommDeviceView&, int p) const {
    return {reinterpret_cast<char*>(g.recvBase + static_cast<uint64_t>(p) * g.recvStride), g.bytes};
  }
  __device__ uint64_t sendSig(int) const {
    return sig;
  }
  __device__ uint64_t recvSig(int) const {
    return sig;
  }
  // This block's share of the send to oneself -> receive from oneself (weak loads and stores, local; both
  // sides have `bytes`, so there is no mismatch to report).
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    if (g.self) copyShare(recv(v, v.rank).ptr, send(v, v.rank).ptr, g.bytes, part, nParts, tid, nt);
  }
#endif
};

}  // namespace meshcomm::movement
