// sendrecv_scratch: a group of point-to-point operations as one launch of the pairwise scratch pipeline.
// Per peer, this rank's sends form one byte stream (in group order) and its receives another; operations
// match by order per (sender, receiver) pair. A pair is active when this rank has at least one operation
// with the peer (the peer must have the matching ones, else its side never signals and the wait times
// out with peer and rank named). Each active pair exchanges a header {total bytes, signature of the
// sequence of operation sizes}; a receiver whose own sizes disagree records a count mismatch (DeviceOp 6)
// and never writes past its own receive buffers (copy limited to min(sent, expected) bytes of the stream).
// Operations with oneself are copied locally in order (same checks). Limits: kMaxP2PSegs operations per
// group and kMaxP2PRanks ranks (host-side arrays passed by value in the kernel parameters).
#include <memory>

#include "collectives/algorithms/movement_algorithms.hpp"
#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {
namespace {

constexpr int kMaxP2PRanks = 32;
constexpr int kMaxP2PSegs = 128;

// Signature of a sequence of operation sizes (both sides compute it over their own view of the pair).
inline uint64_t mixSize(uint64_t h, uint64_t bytes) {
  return (h ^ (bytes + 0x9E3779B97F4A7C15ull)) * 0x100000001B3ull;
}
constexpr uint64_t kSigSeed = 0xCBF29CE484222325ull;

struct SendRecvPlan : PlanBase {
  static constexpr bool kHeader = true;
  Seg segs[kMaxP2PSegs];  // sends of peer 0, 1, ..., then receives
  uint16_t sendStart[kMaxP2PRanks + 1], recvStart[kMaxP2PRanks + 1];  // segment ranges per peer
  uint64_t sendBytes[kMaxP2PRanks], recvBytes[kMaxP2PRanks];
  uint64_t sendSigs[kMaxP2PRanks], recvSigs[kMaxP2PRanks];

  __device__ bool active(const CommDeviceView&, int p) const {
    return sendStart[p + 1] > sendStart[p] || recvStart[p + 1] > recvStart[p];
  }
  __device__ SegStream send(const CommDeviceView&, int p) const {
    return {segs + sendStart[p], sendStart[p + 1] - sendStart[p], sendBytes[p]};
  }
  __device__ SegStream recv(const CommDeviceView&, int p) const {
    return {segs + recvStart[p], recvStart[p + 1] - recvStart[p], recvBytes[p]};
  }
  __device__ uint64_t sendSig(int p) const { return sendSigs[p]; }
  __device__ uint64_t recvSig(int p) const { return recvSigs[p]; }

  // Sends to oneself -> receives from oneself, this block's share of the stream.
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts) const {
    const int r = v.rank;
    if (!active(v, r)) return;
    if ((sendBytes[r] != recvBytes[r] || sendSigs[r] != recvSigs[r]) && part == 0 && threadIdx.x == 0) {
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
      if (sLo < sHi) dst.fromScratch(src.segs[i].ptr + (sLo - sBase), sLo, sHi - sLo);
      sBase += src.segs[i].bytes;
    }
  }
};

class SendRecvScratch : public EngineAlgorithm {
 public:
  SendRecvScratch() : EngineAlgorithm("sendrecv_scratch", Collective::SendRecv, /*needsHeader=*/true) {}
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override {
    std::string r = engineReason(topo);
    if (!r.empty()) return r;
    if (topo.nRanks > kMaxP2PRanks) return detail::concat("at most ", kMaxP2PRanks, " ranks");
    if (args.numP2POps > static_cast<size_t>(kMaxP2PSegs)) {
      return detail::concat(args.numP2POps, " operations in one group (at most ", kMaxP2PSegs, ")");
    }
    return {};
  }
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void*) override {
    const CommDeviceView& v = resources.view();
    const int n = v.nRanks;
    MESHCOMM_REQUIRE(n <= kMaxP2PRanks && args.numP2POps <= static_cast<size_t>(kMaxP2PSegs), "rank ", v.rank,
                     ": sendrecv: group too large (", args.numP2POps, " operations, ", n, " ranks)");
    if (args.numP2POps == 0) return;
    const uint64_t es = dataTypeSize(args.dtype);
    SendRecvPlan plan;
    // Counting sort by (kind, peer), keeping group order within each.
    uint16_t nSend[kMaxP2PRanks] = {}, nRecv[kMaxP2PRanks] = {};
    for (size_t i = 0; i < args.numP2POps; ++i) {
      const P2POp& op = args.p2pOps[i];
      MESHCOMM_REQUIRE(op.peer >= 0 && op.peer < n, "rank ", v.rank, ": sendrecv: operation ", i, ": peer ",
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
    launchEngine(resources, args, config, plan);
  }
};

}  // namespace

std::shared_ptr<Algorithm> makeSendRecvScratch() {
  return std::make_shared<SendRecvScratch>();
}

}  // namespace meshcomm::movement
