// The SendRecv plan shared by sendrecv_scratch (pairwise scratch pipeline) and sendrecv_ll (LL streams with
// the pipeline for large pairs): a group's operations sorted on the host (by peer, keeping group order)
// into per-peer send and receive segment lists, passed by value in the kernel parameters. Per peer, the
// sends form one byte stream and the receives another, so several operations per (sender, receiver) pair
// match by order. A signature of each sequence of operation sizes travels in the pair's header; a receiver
// whose own sequence differs records a count mismatch. The host part (makeSendRecvPlan) builds without
// nvcc (unit tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {

constexpr int kMaxP2PRanks = 32;
constexpr int kMaxP2PSegs = 128;

// Signature of a sequence of operation sizes (both sides compute it over their own view of the pair).
MESHCOMM_HOST_DEVICE_INLINE uint64_t mixSize(uint64_t h, uint64_t bytes) {
  return (h ^ (bytes + 0x9E3779B97F4A7C15ull)) * 0x100000001B3ull;
}
constexpr uint64_t kSigSeed = 0xCBF29CE484222325ull;

struct SendRecvPlan : PlanBase {
  static constexpr bool kHeader = true;
  Seg segs[kMaxP2PSegs];  // sends of peer 0, 1, ..., then receives
  uint16_t sendStart[kMaxP2PRanks + 1], recvStart[kMaxP2PRanks + 1];  // segment ranges per peer
  uint64_t sendBytes[kMaxP2PRanks], recvBytes[kMaxP2PRanks];
  uint64_t sendSigs[kMaxP2PRanks], recvSigs[kMaxP2PRanks];

  // This rank has at least one operation with p (host and device).
  MESHCOMM_HOST_DEVICE_INLINE bool hasOps(int p) const {
    return sendStart[p + 1] > sendStart[p] || recvStart[p + 1] > recvStart[p];
  }

#if defined(__CUDACC__)
  // active, send, recv, sendSig, recvSig: pure (read the by-value plan in the kernel parameters).
  __device__ bool active(const CommDeviceView&, int p) const {
    return hasOps(p);
  }
  __device__ SegStream send(const CommDeviceView&, int p) const {
    return {segs + sendStart[p], sendStart[p + 1] - sendStart[p], sendBytes[p]};
  }
  __device__ SegStream recv(const CommDeviceView&, int p) const {
    return {segs + recvStart[p], recvStart[p + 1] - recvStart[p], recvBytes[p]};
  }
  __device__ uint64_t sendSig(int p) const {
    return sendSigs[p];
  }
  __device__ uint64_t recvSig(int p) const {
    return recvSigs[p];
  }

  // Sends to oneself -> receives from oneself, this block's share of the stream. Weak loads and stores
  // (nothing crosses a GPU); a size mismatch is reported once (block 0, thread 0) and at most the
  // receiver's bytes are written.
  __device__ uint64_t selfBytes(const CommDeviceView& v) const {
    return minU(sendBytes[v.rank], recvBytes[v.rank]);
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    const int r = v.rank;
    if (!active(v, r)) return;
    if ((sendBytes[r] != recvBytes[r] || sendSigs[r] != recvSigs[r]) && part == 0 && tid == 0) {
      reportMismatch(selfSpinContext(v), r, recvBytes[r], sendBytes[r]);
    }
    const uint64_t bytes = minU(sendBytes[r], recvBytes[r]);
    const uint64_t per = roundUp16(divUp(bytes, nParts));
    const uint64_t lo = per * part, hi = minU(bytes, lo + per);
    if (lo >= hi) return;
    // Walk the source segments overlapping [lo, hi) and, for each, the destination segments.
    const SegStream src = send(v, r), dst = recv(v, r);
    uint64_t sBase = 0;
    for (int i = 0; i < src.n && sBase < hi; ++i) {
      const uint64_t sLo = maxU(sBase, lo), sHi = minU(sBase + src.segs[i].bytes, hi);
      if (sLo < sHi) dst.fromScratch(src.segs[i].ptr + (sLo - sBase), sLo, sHi - sLo, tid, nt);
      sBase += src.segs[i].bytes;
    }
  }
#endif
};

// Why a SendRecv group cannot run on n ranks: the engine's reason `engine` (topology, buffers) if any, else
// the limits of the by-value plan; "" when it can.
inline std::string sendRecvReason(std::string engine, const CollectiveArgs& args, int nRanks) {
  if (!engine.empty()) return engine;
  if (nRanks > kMaxP2PRanks) return detail::concat("at most ", kMaxP2PRanks, " ranks");
  if (args.numP2POps > static_cast<size_t>(kMaxP2PSegs)) {
    return detail::concat(args.numP2POps, " operations in one group (at most ", kMaxP2PSegs, ")");
  }
  return {};
}

// The plan of one group on `rank` of `n`: a counting sort by (kind, peer) that keeps group order within
// each (P2POp::count in bytes times the dtype size, as the SendRecv collective carries them). Throws for a
// peer out of range or a group over the limits.
inline SendRecvPlan makeSendRecvPlan(const CollectiveArgs& args, int rank, int n) {
  MESHCOMM_REQUIRE(n <= kMaxP2PRanks && args.numP2POps <= static_cast<size_t>(kMaxP2PSegs), "rank ", rank,
                   ": sendrecv: group too large (", args.numP2POps, " operations, ", n, " ranks)");
  const uint64_t es = dataTypeSize(args.dtype);
  SendRecvPlan plan;
  uint16_t nSend[kMaxP2PRanks] = {}, nRecv[kMaxP2PRanks] = {};
  for (size_t i = 0; i < args.numP2POps; ++i) {
    const P2POp& op = args.p2pOps[i];
    MESHCOMM_REQUIRE(op.peer >= 0 && op.peer < n, "rank ", rank, ": sendrecv: operation ", i, ": peer ",
                     op.peer, " out of range [0, ", n, ")");
    (op.kind == P2POp::Send ? nSend : nRecv)[op.peer]++;
  }
  plan.sendStart[0] = 0;
  for (int p = 0; p < n; ++p) plan.sendStart[p + 1] = plan.sendStart[p] + nSend[p];
  plan.recvStart[0] = plan.sendStart[n];
  for (int p = 0; p < n; ++p) plan.recvStart[p + 1] = plan.recvStart[p] + nRecv[p];
  for (int p = n; p < kMaxP2PRanks; ++p)
    plan.sendStart[p + 1] = plan.sendStart[n], plan.recvStart[p + 1] = plan.recvStart[n];
  uint16_t fillSend[kMaxP2PRanks] = {}, fillRecv[kMaxP2PRanks] = {};
  for (int p = 0; p < kMaxP2PRanks; ++p) {
    plan.sendBytes[p] = plan.recvBytes[p] = 0;
    plan.sendSigs[p] = plan.recvSigs[p] = kSigSeed;
  }
  for (size_t i = 0; i < args.numP2POps; ++i) {
    const P2POp& op = args.p2pOps[i];
    const uint64_t bytes = static_cast<uint64_t>(op.count) * es;
    const int p = op.peer;
    if (op.kind == P2POp::Send) {
      plan.segs[plan.sendStart[p] + fillSend[p]++] = {static_cast<char*>(op.buffer), bytes};
      plan.sendBytes[p] += bytes;
      plan.sendSigs[p] = mixSize(plan.sendSigs[p], bytes);
    } else {
      plan.segs[plan.recvStart[p] + fillRecv[p]++] = {static_cast<char*>(op.buffer), bytes};
      plan.recvBytes[p] += bytes;
      plan.recvSigs[p] = mixSize(plan.recvSigs[p], bytes);
    }
  }
  return plan;
}

}  // namespace meshcomm::movement
