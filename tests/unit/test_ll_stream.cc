// Host-side logic of the LL stream algorithms (sendrecv_ll, alltoallv_ll, gather/scatter_stream) and of the
// plans they share with the scratch pipeline: group sorting and signatures, host counts, the per-pair
// LL/pipeline split (equal on both sides of every pair of a correct program), the launches of a call, the
// LL grid, strided groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/algorithms/ll_stream.hpp"
#include "collectives/algorithms/strided_group.cuh"
#include "meshcomm/errors.hpp"

namespace meshcomm::movement {
namespace {

char* fakePtr(uintptr_t v) {
  return reinterpret_cast<char*>(v);
}

CollectiveArgs groupArgs(const std::vector<P2POp>& ops) {
  CollectiveArgs a;
  a.collective = Collective::SendRecv;
  a.dtype = DataType::U8;
  a.p2pOps = ops.data();
  a.numP2POps = ops.size();
  return a;
}

CommTopology topoOf(int n, int rank, int sms = 132) {
  CommTopology t;
  t.rank = rank;
  t.nRanks = n;
  t.smCount = sms;
  return t;
}

TEST(SendRecvPlan, SortsByPeerKeepingGroupOrder) {
  const std::vector<P2POp> ops = {
      {P2POp::Recv, 2, fakePtr(0x100), 5}, {P2POp::Send, 1, fakePtr(0x200), 7},
      {P2POp::Send, 2, fakePtr(0x300), 9}, {P2POp::Send, 1, fakePtr(0x400), 11},
      {P2POp::Recv, 0, fakePtr(0x500), 3},
  };
  const SendRecvPlan plan = makeSendRecvPlan(groupArgs(ops), 0, 4);
  // sends: peer 1 (0x200, 0x400), peer 2 (0x300); then receives: peer 0 (0x500), peer 2 (0x100)
  EXPECT_EQ(plan.sendStart[1], 0);
  EXPECT_EQ(plan.sendStart[2], 2);
  EXPECT_EQ(plan.sendStart[3], 3);
  EXPECT_EQ(plan.sendStart[4], 3);
  EXPECT_EQ(plan.recvStart[0], 3);
  EXPECT_EQ(plan.recvStart[1], 4);
  EXPECT_EQ(plan.recvStart[3], 5);
  EXPECT_EQ(plan.recvStart[kMaxP2PRanks], 5);
  EXPECT_EQ(plan.segs[0].ptr, fakePtr(0x200));
  EXPECT_EQ(plan.segs[1].ptr, fakePtr(0x400));
  EXPECT_EQ(plan.segs[2].ptr, fakePtr(0x300));
  EXPECT_EQ(plan.segs[3].ptr, fakePtr(0x500));
  EXPECT_EQ(plan.segs[4].ptr, fakePtr(0x100));
  EXPECT_EQ(plan.sendBytes[1], 18u);
  EXPECT_EQ(plan.sendBytes[2], 9u);
  EXPECT_EQ(plan.recvBytes[0], 3u);
  EXPECT_EQ(plan.recvBytes[2], 5u);
  EXPECT_EQ(plan.sendSigs[1], mixSize(mixSize(kSigSeed, 7), 11));
  EXPECT_NE(plan.sendSigs[1], mixSize(mixSize(kSigSeed, 11), 7));  // order matters
  EXPECT_TRUE(plan.hasOps(0));
  EXPECT_TRUE(plan.hasOps(1));
  EXPECT_TRUE(plan.hasOps(2));
  EXPECT_FALSE(plan.hasOps(3));
}

TEST(SendRecvPlan, MatchedSidesAgreeOnBytesAndSignatures) {
  // Rank 0 sends 3 then 5 bytes to rank 1, which receives 3 then 5 (and one op with itself).
  const std::vector<P2POp> a = {{P2POp::Send, 1, fakePtr(0x10), 3}, {P2POp::Send, 1, fakePtr(0x20), 5}};
  const std::vector<P2POp> b = {{P2POp::Recv, 0, fakePtr(0x30), 3},
                                {P2POp::Send, 1, fakePtr(0x40), 4},
                                {P2POp::Recv, 1, fakePtr(0x50), 4},
                                {P2POp::Recv, 0, fakePtr(0x60), 5}};
  const SendRecvPlan pa = makeSendRecvPlan(groupArgs(a), 0, 2), pb = makeSendRecvPlan(groupArgs(b), 1, 2);
  EXPECT_EQ(pa.sendBytes[1], pb.recvBytes[0]);
  EXPECT_EQ(pa.sendSigs[1], pb.recvSigs[0]);
  EXPECT_EQ(pb.sendSigs[1], pb.recvSigs[1]);
  // Same total, other split: equal bytes, different signature (the receiver reports a mismatch).
  const std::vector<P2POp> c = {{P2POp::Recv, 0, fakePtr(0x30), 5}, {P2POp::Recv, 0, fakePtr(0x60), 3}};
  const SendRecvPlan pc = makeSendRecvPlan(groupArgs(c), 1, 2);
  EXPECT_EQ(pa.sendBytes[1], pc.recvBytes[0]);
  EXPECT_NE(pa.sendSigs[1], pc.recvSigs[0]);
}

TEST(SendRecvPlan, CountsScaleByDtypeAndLimitsAreChecked) {
  std::vector<P2POp> ops = {{P2POp::Send, 1, fakePtr(0x10), 3}};
  CollectiveArgs args = groupArgs(ops);
  args.dtype = DataType::F32;
  EXPECT_EQ(makeSendRecvPlan(args, 0, 2).sendBytes[1], 12u);
  ops[0].peer = 2;
  args = groupArgs(ops);
  EXPECT_THROW(makeSendRecvPlan(args, 0, 2), Error);
  EXPECT_THROW(makeSendRecvPlan(args, 0, kMaxP2PRanks + 1), Error);
  EXPECT_EQ(sendRecvReason("", args, 8), "");
  EXPECT_EQ(sendRecvReason("no engine", args, 8), "no engine");  // the engine's reason comes first
  EXPECT_NE(sendRecvReason("", args, kMaxP2PRanks + 1), "");
  std::vector<P2POp> many(kMaxP2PSegs + 1, P2POp{P2POp::Send, 1, fakePtr(0x10), 1});
  EXPECT_NE(sendRecvReason("", groupArgs(many), 2), "");
}

TEST(HostCounts, BytesFromElements) {
  const size_t sc[] = {1, 2, 3}, sd[] = {0, 1, 3}, rc[] = {4, 5, 6}, rd[] = {10, 20, 30};
  CollectiveArgs a;
  a.collective = Collective::AllToAllv;
  a.dtype = DataType::BF16;
  a.sendCounts = sc, a.sendDispls = sd, a.recvCounts = rc, a.recvDispls = rd;
  const HostCounts c = makeHostCounts(a, 0, 3);
  EXPECT_EQ(c.send[2], 6u);
  EXPECT_EQ(c.sendDispl[2], 6u);
  EXPECT_EQ(c.recv[1], 10u);
  EXPECT_EQ(c.recvDispl[1], 40u);
  EXPECT_EQ(c.send[3], 0u);
  EXPECT_THROW(makeHostCounts(a, 0, kMaxHostCountRanks + 1), Error);
}

TEST(LLStream, SlotHoldsHeaderAndCapacity) {
  EXPECT_EQ(llStreamSlotBytes(128 << 10), 32u + (128u << 10) * 2);
  EXPECT_EQ(llStreamSlotBytes(9), 32u + 2 * 16);  // a partial last packet
  for (uint64_t c : kLLStreamCapacities) EXPECT_EQ(llStreamSlotBytes(c) % 16, 0u);
}

// Random segmentation of `total` bytes (empty segments included) over buffers kept in `store`.
std::vector<Seg> randomSegs(std::mt19937_64& rng, uint64_t total, std::vector<std::vector<char>>& store) {
  std::vector<Seg> segs;
  uint64_t left = total;
  while (left > 0 || segs.empty()) {
    const uint64_t r = rng() % 10;
    uint64_t b = r == 0 ? 0 : r < 7 ? 1 + rng() % 13 : 1 + rng() % 200;
    if (b > left || segs.size() + 1 == static_cast<size_t>(kMaxP2PSegs)) b = left;
    store.emplace_back(b + 1);  // never empty: a valid pointer for empty segments too
    segs.push_back({store.back().data(), b});
    left -= b;
  }
  return segs;
}

// Host model of the LL stream data path: the sender's blocks write every packet once with the stream's
// bytes (whole packets as device::putPackets would, cut packets through gatherPacket); the receiver's blocks
// (another grid, another segmentation) write exactly the stream bytes below the limit into its segments.
TEST(LLStream, PacketWalkMovesEveryByteOnce) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 3000; ++iter) {
    const uint64_t total = rng() % 8 == 0 ? 0 : 1 + rng() % 600;
    std::vector<std::vector<char>> srcStore, dstStore;
    std::vector<Seg> src = randomSegs(rng, total, srcStore);
    std::vector<char> stream;
    for (Seg& sg : src) {
      for (uint64_t i = 0; i < sg.bytes; ++i) sg.ptr[i] = static_cast<char>(rng());
      stream.insert(stream.end(), sg.ptr, sg.ptr + sg.bytes);
    }
    const uint64_t nPk = divUp(total, 8);
    std::vector<int> hits(nPk, 0);
    std::vector<uint32_t> w1(nPk, 0), w2(nPk, 0);
    const int B = 1 + static_cast<int>(rng() % 5);
    for (int c = 0; c < B; ++c) {
      const PacketRange pr = llPacketRange(total, B, c);
      walkPackets(
          src.data(), static_cast<int>(src.size()), total, pr.pk0, pr.pk1,
          [&](int i, uint64_t lo, uint64_t kLo, uint64_t kHi) {
            EXPECT_GE(kLo * 8, lo);
            EXPECT_LE(kHi * 8, lo + src[i].bytes);
            for (uint64_t k = kLo; k < kHi; ++k) {
              ++hits[k];
              std::memcpy(&w1[k], src[i].ptr + (k * 8 - lo), 4);
              std::memcpy(&w2[k], src[i].ptr + (k * 8 - lo) + 4, 4);
            }
            return true;
          },
          [&](int i, uint64_t lo, uint64_t k) {
            EXPECT_LE(lo, k * 8);
            ++hits[k];
            gatherPacket(src.data(), static_cast<int>(src.size()), i, lo, k, w1[k], w2[k]);
            return true;
          });
    }
    for (uint64_t k = 0; k < nPk; ++k) {
      ASSERT_EQ(hits[k], 1) << "packet " << k << " of " << total << " bytes";
      char want[8] = {};
      for (uint64_t b = 0; b < 8 && k * 8 + b < total; ++b) want[b] = stream[k * 8 + b];
      uint32_t v1, v2;
      std::memcpy(&v1, want, 4);
      std::memcpy(&v2, want + 4, 4);
      ASSERT_EQ(w1[k], v1) << "packet " << k;
      ASSERT_EQ(w2[k], v2) << "packet " << k;
    }

    // Receiver: expects its own total (maybe different), takes min(sent, expected).
    const uint64_t expected = rng() % 3 == 0 ? rng() % 700 : total;
    const uint64_t limit = std::min(total, expected);
    std::vector<Seg> dst = randomSegs(rng, expected, dstStore);
    for (auto& buf : dstStore) std::fill(buf.begin(), buf.end(), static_cast<char>(0xEE));
    std::vector<int> got(divUp(limit, 8), 0);
    const int B2 = 1 + static_cast<int>(rng() % 5);
    for (int c = 0; c < B2; ++c) {
      const PacketRange pr = llPacketRange(limit, B2, c);
      walkPackets(
          dst.data(), static_cast<int>(dst.size()), limit, pr.pk0, pr.pk1,
          [&](int i, uint64_t lo, uint64_t kLo, uint64_t kHi) {
            for (uint64_t k = kLo; k < kHi; ++k) {  // as device::getPackets of (kHi - kLo) * 8 bytes
              ++got[k];
              std::memcpy(dst[i].ptr + (k * 8 - lo), &w1[k], 4);
              std::memcpy(dst[i].ptr + (k * 8 - lo) + 4, &w2[k], 4);
            }
            return true;
          },
          [&](int i, uint64_t lo, uint64_t k) {
            ++got[k];
            scatterPacket(dst.data(), static_cast<int>(dst.size()), i, lo, k, limit, w1[k], w2[k]);
            return true;
          });
    }
    for (uint64_t k = 0; k < got.size(); ++k) ASSERT_EQ(got[k], 1) << "received packet " << k;
    uint64_t pos = 0;
    for (size_t i = 0; i < dst.size(); ++i) {
      for (uint64_t b = 0; b <= dst[i].bytes; ++b, ++pos) {  // b == bytes: the spare byte past the segment
        const bool inSeg = b < dst[i].bytes;
        const char want = inSeg && pos < limit ? stream[pos] : static_cast<char>(0xEE);
        ASSERT_EQ(dst[i].ptr[b], want) << "segment " << i << " byte " << b << " (limit " << limit << ")";
        if (!inSeg) --pos;
      }
    }
  }
}

TEST(LLStream, PacketRangesPartitionTheStream) {
  for (uint64_t bytes : {0ull, 1ull, 8ull, 9ull, 1000ull, 131072ull}) {
    for (int B : {1, 2, 3, 7, 64}) {
      uint64_t next = 0;
      for (int c = 0; c < B; ++c) {
        const PacketRange r = llPacketRange(bytes, B, c);
        EXPECT_LE(r.pk0, r.pk1);
        if (r.pk0 < r.pk1) {
          EXPECT_EQ(r.pk0, next);
          next = r.pk1;
        }
      }
      EXPECT_EQ(next, divUp(bytes, 8));
    }
  }
}

TEST(LLStream, SplitByLargerDirectionInclusive) {
  PairBytes b;
  const int n = 6, rank = 2;
  b.active = (1u << 0) | (1u << 1) | (1u << 3) | (1u << 5);  // not 4 (inactive), not 2 (self)
  b.send[0] = 100, b.recv[0] = 0;
  b.send[1] = 0, b.recv[1] = 101;  // only the receive is over 100
  b.send[3] = 100, b.recv[3] = 100;
  b.send[4] = 1, b.recv[4] = 1;
  b.send[5] = 0, b.recv[5] = 0;  // header only
  const PairSplit s = splitPairs(rank, n, b, 100);
  EXPECT_EQ(s.llPairs, (1u << 0) | (1u << 3) | (1u << 5));
  EXPECT_EQ(s.scratchPairs, 1u << 1);
  ASSERT_EQ(s.nLL, 3);
  EXPECT_EQ(s.llPeers[0], 3);  // order rank+1, rank+2, ...
  EXPECT_EQ(s.llPeers[1], 5);
  EXPECT_EQ(s.llPeers[2], 0);
  EXPECT_EQ(s.maxLLBytes, 100u);
  // No LL region: every active pair goes through the pipeline.
  const PairSplit none = splitPairs(rank, n, b, 0);
  EXPECT_EQ(none.llPairs, 0u);
  EXPECT_EQ(none.nLL, 0);
  EXPECT_EQ(none.scratchPairs, b.active);
}

// For correct programs (receiver counts = sender counts), both sides of every pair choose the same path.
TEST(LLStream, BothSidesOfEveryPairAgree) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    const int n = 2 + static_cast<int>(rng() % 7);
    const uint64_t cap = kLLStreamCapacities[rng() % 4];
    std::vector<uint64_t> m(n * n);  // m[src * n + dst] bytes; some around the capacity
    for (auto& v : m) {
      const uint64_t r = rng() % 4;
      v = r == 0 ? 0 : r == 1 ? cap - 1 + rng() % 3 : rng() % (2 * cap);
    }
    std::vector<uint8_t> talks(n * n);  // sendrecv: pair (a, b) has operations (symmetric)
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) talks[a * n + b] = talks[b * n + a] = rng() % 3 != 0;
    for (bool allPairs : {true, false}) {
      std::vector<PairSplit> splits;
      for (int r = 0; r < n; ++r) {
        PairBytes b;
        for (int p = 0; p < n; ++p) {
          if (p == r || (!allPairs && !talks[r * n + p])) continue;
          b.active |= 1u << p;
          b.send[p] = m[r * n + p];
          b.recv[p] = m[p * n + r];
        }
        splits.push_back(splitPairs(r, n, b, cap));
      }
      for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) {
          if (a == b) continue;
          EXPECT_EQ((splits[a].llPairs >> b) & 1u, (splits[b].llPairs >> a) & 1u) << "pair " << a << "," << b;
          EXPECT_EQ((splits[a].scratchPairs >> b) & 1u, (splits[b].scratchPairs >> a) & 1u);
        }
      }
    }
  }
}

TEST(LLStream, PairBytesOfBothPlans) {
  const std::vector<P2POp> ops = {{P2POp::Send, 1, fakePtr(0x10), 300},
                                  {P2POp::Recv, 1, fakePtr(0x20), 200},
                                  {P2POp::Send, 0, fakePtr(0x30), 40},
                                  {P2POp::Recv, 0, fakePtr(0x40), 50}};
  const PairBytes b = pairBytes(makeSendRecvPlan(groupArgs(ops), 0, 4), 0, 4);
  EXPECT_EQ(b.active, 1u << 1);
  EXPECT_EQ(b.send[1], 300u);
  EXPECT_EQ(b.recv[1], 200u);
  EXPECT_TRUE(b.self);
  EXPECT_EQ(b.selfBytes, 40u);
  const PairBytes noSelf = pairBytes(makeSendRecvPlan(groupArgs({ops[0]}), 0, 4), 0, 4);
  EXPECT_FALSE(noSelf.self);

  HostCounts c{};
  c.send[0] = 7, c.recv[0] = 9, c.send[1] = 1, c.recv[2] = 2;
  const PairBytes h = pairBytes(c, 0, 3);
  EXPECT_EQ(h.active, (1u << 1) | (1u << 2));  // every pair, zero-byte ones included
  EXPECT_TRUE(h.self);
  EXPECT_EQ(h.selfBytes, 7u);
  EXPECT_EQ(h.recv[2], 2u);
}

TEST(LLStream, LaunchesOfACall) {
  PairSplit ll, scratch, mixed, none;
  ll.nLL = 1, ll.llPairs = 2;
  scratch.scratchPairs = 2;
  mixed.nLL = 1, mixed.llPairs = 2, mixed.scratchPairs = 4;
  // Only LL pairs: one fused kernel.
  StreamLaunches l = planLaunches(ll, true);
  EXPECT_EQ(l.before, kPartSend | kPartRecv | kPartSelf);
  EXPECT_FALSE(l.engine);
  EXPECT_EQ(l.after, 0u);
  // Only pipeline pairs: the pipeline alone, with the self copy.
  l = planLaunches(scratch, true);
  EXPECT_EQ(l.before, 0u);
  EXPECT_TRUE(l.engine);
  EXPECT_TRUE(l.engineSelf);
  EXPECT_EQ(l.after, 0u);
  // Both: LL send (+ self) before the pipeline, LL receive after it.
  l = planLaunches(mixed, true);
  EXPECT_EQ(l.before, kPartSend | kPartSelf);
  EXPECT_TRUE(l.engine);
  EXPECT_FALSE(l.engineSelf);
  EXPECT_EQ(l.after, static_cast<uint32_t>(kPartRecv));
  // Self only: a copy kernel; nothing at all: no launch.
  l = planLaunches(none, true);
  EXPECT_EQ(l.before, static_cast<uint32_t>(kPartSelf));
  EXPECT_FALSE(l.engine);
  l = planLaunches(none, false);
  EXPECT_EQ(l.before, 0u);
  EXPECT_FALSE(l.engine);
  EXPECT_EQ(l.after, 0u);
}

TEST(LLStream, GridStaysWithinTheSMs) {
  for (int n : {2, 4, 8, 32}) {
    for (uint64_t bytes : {uint64_t{1}, uint64_t{4096}, uint64_t{128} << 10}) {
      PairSplit s;
      s.nLL = n - 1;
      s.maxLLBytes = bytes;
      const CommTopology t = topoOf(n, 0, 132);
      const LLStreamShape g = llStreamShape(s, uint64_t{1} << 30, kLLThreads, t);
      EXPECT_GE(g.blocksPerPeer, 1);
      EXPECT_LE(g.pairBlocks, std::max(132, n - 1));
      EXPECT_LE(g.selfBlocks, 132);
      EXPECT_LE(llStreamBlocks(g, kPartSend | kPartSelf), std::max(132, n - 1));
      EXPECT_EQ(llStreamBlocks(g, kPartRecv), g.pairBlocks);
    }
  }
  PairSplit none;
  const LLStreamShape g = llStreamShape(none, 0, kLLThreads, topoOf(4, 0));
  EXPECT_EQ(g.pairBlocks, 0);
  EXPECT_EQ(llStreamBlocks(g, kPartSelf), 1);
  // 1 MiB self copy: 16 blocks of 64 KiB.
  EXPECT_EQ(llStreamShape(none, 1 << 20, kLLThreads, topoOf(4, 0)).selfBlocks, 16);
}

// An alltoall posted as a group on `rank` of n: send to / receive from every p (oneself too when `self`) of
// `count` bytes at sendAt(p) / recvAt(p), in nccl-tests' order (send p, recv p, p = 0..n-1).
template <class SendAt, class RecvAt>
std::vector<P2POp> alltoallGroup(int rank, int n, size_t count, bool self, SendAt sendAt, RecvAt recvAt) {
  std::vector<P2POp> ops;
  for (int p = 0; p < n; ++p) {
    if (p == rank && !self) continue;
    ops.push_back({P2POp::Send, p, fakePtr(sendAt(p)), count});
    ops.push_back({P2POp::Recv, p, fakePtr(recvAt(p)), count});
  }
  return ops;
}

bool isStrided(const std::vector<P2POp>& ops, int rank, int n, StridedGroup& g) {
  return stridedGroup(makeSendRecvPlan(groupArgs(ops), rank, n), rank, n, g);
}

TEST(StridedGroup, AlltoallShapesAreFoundWithTheirScalars) {
  StridedGroup g;
  // nccl-tests' alltoall: chunk p at base + p * count, oneself included.
  ASSERT_TRUE(isStrided(
      alltoallGroup(
          2, 4, 96, true, [](int p) { return 0x10000 + 96 * p; }, [](int p) { return 0x90000 + 96 * p; }),
      2, 4, g));
  EXPECT_EQ(g.sendPeers, 0xFu);
  EXPECT_EQ(g.recvPeers, 0xFu);
  EXPECT_EQ(g.sendBytes, 96u);
  EXPECT_EQ(g.recvBytes, 96u);
  EXPECT_EQ(g.sendBase, 0x10000u);
  EXPECT_EQ(g.sendStride, 96u);
  EXPECT_EQ(g.recvBase, 0x90000u);
  EXPECT_EQ(g.recvStride, 96u);
  // The header signatures are the segment lists' for one operation (a peer running them agrees).
  const SendRecvPlan plan =
      makeSendRecvPlan(groupArgs(alltoallGroup(
                           2, 4, 96, true, [](int p) { return 96 * p; }, [](int p) { return 96 * p; })),
                       2, 4);
  EXPECT_EQ(StridedPlan(g).sendSig(0), plan.sendSigs[0]);
  EXPECT_EQ(StridedPlan(g).recvSig(3), plan.recvSigs[3]);
  // Without oneself, sides with different strides; rank 0's chunk (unused) is extrapolated.
  ASSERT_TRUE(isStrided(
      alltoallGroup(
          0, 4, 8, false, [](int p) { return 0x1000 + 64 * p; }, [](int p) { return 0x8000 + 8 * p; }),
      0, 4, g));
  EXPECT_EQ(g.sendPeers, 0xEu);
  EXPECT_EQ(g.sendBase, 0x1000u);
  EXPECT_EQ(g.recvStride, 8u);
  // A negative stride (chunks in reverse order) and a zero stride (every send from one buffer).
  ASSERT_TRUE(
      isStrided(alltoallGroup(
                    1, 4, 16, true, [](int p) { return 0x1000; }, [](int p) { return 0x9000 - 16 * p; }),
                1, 4, g));
  EXPECT_EQ(g.sendStride, 0u);
  EXPECT_EQ(g.recvBase + 3 * g.recvStride, uint64_t{0x9000 - 48});
  // Two ranks without oneself: one peer, any stride fits. Zero-byte operations too.
  ASSERT_TRUE(isStrided(alltoallGroup(
                            1, 2, 0, false, [](int) { return 0x50; }, [](int) { return 0x70; }),
                        1, 2, g));
  EXPECT_EQ(g.sendBytes, 0u);
  EXPECT_EQ(g.sendBase, 0x50u);
  EXPECT_EQ(g.recvBase, 0x70u);
  // The order of posting does not matter (the plan sorts by peer).
  auto ops = alltoallGroup(
      3, 4, 32, true, [](int p) { return 0x100 * (p + 1); }, [](int p) { return 0x5000 + 32 * p; });
  std::reverse(ops.begin(), ops.end());
  EXPECT_TRUE(isStrided(ops, 3, 4, g));
}

TEST(StridedGroup, OneSidedShapesAreFound) {
  StridedGroup g;
  // nccl-tests' gather on the root (rank 1): a send to oneself, a receive from every rank at r * count.
  std::vector<P2POp> root = {{P2POp::Send, 1, fakePtr(0x100), 40}};
  for (int r = 0; r < 4; ++r) root.push_back({P2POp::Recv, r, fakePtr(0x8000 + 40 * r), 40});
  ASSERT_TRUE(isStrided(root, 1, 4, g));
  EXPECT_EQ(g.sendPeers, 0x2u);
  EXPECT_EQ(g.recvPeers, 0xFu);
  EXPECT_EQ(g.recvBase, 0x8000u);
  EXPECT_EQ(g.recvStride, 40u);
  // ... and on another rank: one send to the root (no receive: the seed signature that way).
  ASSERT_TRUE(isStrided({{P2POp::Send, 1, fakePtr(0x300), 40}}, 2, 4, g));
  EXPECT_EQ(g.sendPeers, 0x2u);
  EXPECT_EQ(g.recvPeers, 0u);
  EXPECT_EQ(g.sendBase + g.sendStride, 0x300u);
  EXPECT_EQ(StridedPlan(g).recvSig(1), kSigSeed);
  EXPECT_EQ(StridedPlan(g).sendSig(1), mixSize(kSigSeed, 40));
  // A ring step: send to the next rank, receive from the previous one, counts differing by direction.
  ASSERT_TRUE(isStrided({{P2POp::Send, 3, fakePtr(0x10), 8}, {P2POp::Recv, 1, fakePtr(0x20), 24}}, 2, 4, g));
  EXPECT_EQ(g.sendPeers, 0x8u);
  EXPECT_EQ(g.recvPeers, 0x2u);
  EXPECT_EQ(g.sendBytes, 8u);
  EXPECT_EQ(g.recvBytes, 24u);
  // Oneself only.
  EXPECT_TRUE(isStrided({{P2POp::Recv, 0, fakePtr(0x20), 5}, {P2POp::Send, 0, fakePtr(0x10), 5}}, 0, 4, g));
}

TEST(StridedGroup, OtherGroupsAreNot) {
  StridedGroup g;
  const auto at = [](int p) { return 0x1000 + 64 * p; };
  const auto rat = [](int p) { return 0x9000 + 64 * p; };
  // The segment lists run these: counts differing within a direction, two operations with a peer, a chunk
  // off the line, a stride that is not an integer, oneself one way only or with differing counts.
  auto ops = alltoallGroup(0, 4, 64, true, at, rat);
  ops[3].count = 63;  // recv from 1
  EXPECT_FALSE(isStrided(ops, 0, 4, g));
  ops = alltoallGroup(0, 4, 64, true, at, rat);
  ops.push_back({P2POp::Send, 1, fakePtr(0x7000), 0});
  EXPECT_FALSE(isStrided(ops, 0, 4, g));
  ops =
      alltoallGroup(0, 4, 64, true, at, [](int p) { return p == 3 ? 0x9000 + 64 * 3 + 8 : 0x9000 + 64 * p; });
  EXPECT_FALSE(isStrided(ops, 0, 4, g));
  ops = alltoallGroup(
      1, 4, 64, false, [](int p) { return p == 0   ? 0x1000
                                          : p == 2 ? 0x1005
                                                   : 0x1008; }, rat);
  EXPECT_FALSE(isStrided(ops, 1, 4, g));  // 5 bytes over 2 peers: no integer stride
  ops = alltoallGroup(0, 4, 64, false, at, rat);
  ops.push_back({P2POp::Send, 0, fakePtr(0x1000), 64});
  EXPECT_FALSE(isStrided(ops, 0, 4, g));
  EXPECT_FALSE(isStrided({{P2POp::Recv, 0, fakePtr(0x20), 5}, {P2POp::Send, 0, fakePtr(0x10), 6}}, 0, 4, g));
  // A peer missing is fine (that pair is not part of the call).
  ops = alltoallGroup(0, 4, 64, true, at, rat);
  ops.erase(ops.begin() + 4, ops.begin() + 6);  // nothing with peer 2
  EXPECT_TRUE(isStrided(ops, 0, 4, g));
  EXPECT_EQ(g.sendPeers, 0xBu);
}

// Even exchanges (sendrecv_ll runs them through the LL exchange kernel): the same bytes to and from every
// other rank, oneself either way. Both sides of a pair see one operation each way of b bytes, so a peer
// running llStreamKernel against it agrees on the header.
TEST(StridedGroup, EvenExchangesAreAlltoallsOfEveryOtherRank) {
  StridedGroup g;
  const auto at = [](int p) { return 0x1000 + 64 * p; };
  const auto rat = [](int p) { return 0x9000 + 64 * p; };
  for (int n : {2, 3, 4, 8}) {
    for (int rank = 0; rank < n; ++rank) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " rank " << rank);
      for (bool self : {true, false}) {
        ASSERT_TRUE(isStrided(alltoallGroup(rank, n, 64, self, at, rat), rank, n, g));
        EXPECT_EQ(evenExchangeBytes(g, rank, n), 64u);
      }
      // Zero bytes: nothing to exchange (a group of count 0 launches nothing anyway).
      ASSERT_TRUE(isStrided(alltoallGroup(rank, n, 0, false, at, rat), rank, n, g));
      EXPECT_EQ(evenExchangeBytes(g, rank, n), 0u);
    }
  }
  // Not even: a peer missing, counts differing by direction, a ring step (send to next, receive from
  // previous) on more than two ranks, one-sided groups, oneself only.
  auto ops = alltoallGroup(0, 4, 64, true, at, rat);
  ops.erase(ops.begin() + 4, ops.begin() + 6);  // nothing with peer 2
  ASSERT_TRUE(isStrided(ops, 0, 4, g));
  EXPECT_EQ(evenExchangeBytes(g, 0, 4), 0u);
  ops = alltoallGroup(1, 4, 64, false, at, rat);
  for (auto& op : ops)
    if (op.kind == P2POp::Recv) op.count = 32;
  ASSERT_TRUE(isStrided(ops, 1, 4, g));
  EXPECT_EQ(evenExchangeBytes(g, 1, 4), 0u);
  ASSERT_TRUE(isStrided({{P2POp::Send, 3, fakePtr(0x10), 8}, {P2POp::Recv, 1, fakePtr(0x20), 8}}, 2, 4, g));
  EXPECT_EQ(evenExchangeBytes(g, 2, 4), 0u);
  ASSERT_TRUE(isStrided({{P2POp::Send, 1, fakePtr(0x300), 40}}, 2, 4, g));
  EXPECT_EQ(evenExchangeBytes(g, 2, 4), 0u);
  ASSERT_TRUE(isStrided({{P2POp::Recv, 0, fakePtr(0x20), 5}, {P2POp::Send, 0, fakePtr(0x10), 5}}, 0, 4, g));
  EXPECT_EQ(evenExchangeBytes(g, 0, 4), 0u);
  // The two-rank sendrecv ring step (send to and receive from the other rank) is one.
  ASSERT_TRUE(isStrided({{P2POp::Send, 0, fakePtr(0x10), 8}, {P2POp::Recv, 0, fakePtr(0x20), 8}}, 1, 2, g));
  EXPECT_EQ(evenExchangeBytes(g, 1, 2), 8u);
  // Its header: the signature of one operation of b bytes, as the segment lists of the peer compute it.
  const SendRecvPlan peer = makeSendRecvPlan(
      groupArgs({{P2POp::Send, 1, fakePtr(0x10), 8}, {P2POp::Recv, 1, fakePtr(0x20), 8}}), 0, 2);
  EXPECT_EQ(peer.recvSigs[1], mixSize(kSigSeed, 8));
  EXPECT_EQ(peer.sendSigs[1], mixSize(kSigSeed, 8));
}

// gather_stream / scatter_stream build the group that nccl-tests posts for the collective (sends and
// receives at r * count), on the root and elsewhere; so do pairBytes of it and of the segment lists.
TEST(StridedGroup, GatherAndScatterAreTheGroupsNcclTestsPosts) {
  constexpr uint64_t kBytes = 96;
  const uint64_t in = 0x10000, out = 0x90000;
  for (int n : {2, 3, 4, 8}) {
    for (int root = 0; root < n; ++root) {
      for (int rank = 0; rank < n; ++rank) {
        for (RootedDirection d : {RootedDirection::Gather, RootedDirection::Scatter}) {
          const bool gather = d == RootedDirection::Gather;
          SCOPED_TRACE(::testing::Message() << (gather ? "gather" : "scatter") << " n " << n << " root "
                                            << root << " rank " << rank);
          std::vector<P2POp> ops;
          if (gather) {
            ops.push_back({P2POp::Send, root, fakePtr(in), kBytes});
            if (rank == root)
              for (int r = 0; r < n; ++r) ops.push_back({P2POp::Recv, r, fakePtr(out + r * kBytes), kBytes});
          } else {
            if (rank == root)
              for (int r = 0; r < n; ++r) ops.push_back({P2POp::Send, r, fakePtr(in + r * kBytes), kBytes});
            ops.push_back({P2POp::Recv, root, fakePtr(out), kBytes});
          }
          StridedGroup posted;
          ASSERT_TRUE(isStrided(ops, rank, n, posted));
          const StridedGroup g = rootedGroup(d, rank, n, root, fakePtr(in), fakePtr(out), kBytes);
          EXPECT_EQ(g.sendPeers, posted.sendPeers);
          EXPECT_EQ(g.recvPeers, posted.recvPeers);
          EXPECT_EQ(g.sendBytes, posted.sendBytes);
          EXPECT_EQ(g.recvBytes, posted.recvBytes);
          EXPECT_EQ(g.sendBase, posted.sendBase);
          EXPECT_EQ(g.recvBase, posted.recvBase);
          // A direction with one peer may have any stride; with several it is the chunk size.
          if (__builtin_popcount(g.sendPeers) > 1) EXPECT_EQ(g.sendStride, kBytes);
          if (__builtin_popcount(g.recvPeers) > 1) EXPECT_EQ(g.recvStride, kBytes);
          const PairBytes a = pairBytes(g, rank, n);
          const PairBytes b = pairBytes(makeSendRecvPlan(groupArgs(ops), rank, n), rank, n);
          EXPECT_EQ(a.active, b.active);
          EXPECT_EQ(a.self, b.self);
          EXPECT_EQ(a.selfBytes, b.selfBytes);
          for (int p = 0; p < n; ++p) {
            EXPECT_EQ(a.send[p], b.send[p]) << "peer " << p;
            EXPECT_EQ(a.recv[p], b.recv[p]) << "peer " << p;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace meshcomm::movement
