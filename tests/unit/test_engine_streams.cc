// Layout rules of the stream engine's region (engine_streams.cuh): every receiver has the same number of
// lanes, a pair has the same lane count in both directions, chain neighbours get every lane, and the
// pairwise engine's blocks per peer fit every pair. The pairwise engine's pair headers (movement_common.cuh):
// each side's check of the other's header fails exactly when the two plans of the pair disagree.
#include <gtest/gtest.h>

#include <array>
#include <random>

#include "collectives/algorithms/engine_streams.cuh"
#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {
namespace {

TEST(EngineStreams, LanesAreSymmetricAndEveryReceiverHasTheSameTotal) {
  for (int n = 2; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      uint64_t total = 0;
      for (int s = 0; s < n; ++s) {
        if (s == r) continue;
        EXPECT_EQ(engineLanes(n, s, r), engineLanes(n, r, s)) << "n " << n << " s " << s << " r " << r;
        EXPECT_GE(engineLanes(n, s, r), pairwiseLanes(n)) << "n " << n << " s " << s << " r " << r;
        EXPECT_LE(engineLanes(n, s, r), kEngineLanes);
        total += static_cast<uint64_t>(engineLanes(n, s, r));
      }
      EXPECT_EQ(total, totalEngineLanes(n)) << "n " << n << " receiver " << r;
    }
  }
}

TEST(EngineStreams, ChainNeighboursGetEveryLane) {
  for (int n = 2; n <= 8; ++n) {
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(engineLanes(n, (r + 1) % n, r), kEngineLanes) << "n " << n;
      EXPECT_EQ(engineLanes(n, (r + n - 1) % n, r), kEngineLanes) << "n " << n;
    }
  }
  EXPECT_EQ(pairwiseLanes(2), kEngineLanes);
  EXPECT_EQ(pairwiseLanes(4), kEngineLanes / 3);
  EXPECT_EQ(totalEngineLanes(4), 2u * kEngineLanes + kEngineLanes / 3);
}

TEST(EngineStreams, RoundPiecesCoverTheStreamOnce) {
  for (uint64_t bytes : {1ull, 15ull, 16ull, 4097ull, 1ull << 20, (1ull << 20) + 3}) {
    for (int B : {1, 3, 44, 128}) {
      const uint64_t roundBytes = 32768ull * static_cast<uint64_t>(B);
      uint64_t covered = 0, next = 0;
      for (uint64_t t = 0; t < divUp(bytes, roundBytes); ++t) {
        for (int c = 0; c < B; ++c) {
          const Piece p = roundPiece(bytes, t, roundBytes, B, c);
          if (p.len == 0) continue;
          EXPECT_EQ(p.off, next) << "bytes " << bytes << " B " << B;
          EXPECT_EQ(p.off % 16, 0u);
          next = p.off + p.len;
          covered += p.len;
        }
      }
      EXPECT_EQ(covered, bytes) << "bytes " << bytes << " B " << B;
    }
  }
}

}  // namespace
}  // namespace meshcomm::movement

namespace meshcomm::movement {
namespace {

// One side's view of a pair: bytes it sends and expects, signatures of its sends and receives.
struct PairView {
  uint64_t send, recv, sendSig, recvSig;
  PairHeader own() const { return ownPairHeader(send, recv, sendSig, recvSig); }
  PairHeader expected() const { return peerPairHeader(send, recv, sendSig, recvSig); }
};

// Whether each side's check (the peer's header against the expected one) passes.
std::array<bool, 2> checks(const PairView& a, const PairView& b) {
  return {b.own() == a.expected(), a.own() == b.expected()};
}

// Pieces: large streams run in about the requested rounds per block (the pairwise engine's kPairwiseRounds,
// the chains' kChainRounds), never below kMinPieceBytes nor above the buffers' pieceMax.
TEST(EngineStreams, PieceCapAimsAtTheRoundsBetweenTheBounds) {
  EngineStreams s;
  s.pieceMax = 320 << 10;  // 2 ranks: 160 MiB of buffers over 128 lanes x kEngineSlots
  s.blocksPerPeer = 128;
  const uint64_t perPeer256M = 128ull << 20, perPeer1G = 512ull << 20, perPeer4M = 2ull << 20;
  for (uint64_t rounds : {kPairwiseRounds, kChainRounds}) {
    const uint64_t rounds256M = divUp(divUp(perPeer256M, 128), s.pieceCap(perPeer256M, rounds));
    EXPECT_GE(rounds256M, rounds);
    EXPECT_LE(rounds256M, rounds + 1);
    EXPECT_EQ(s.pieceCap(perPeer4M, rounds), kMinPieceBytes);
    for (uint64_t bytes = 1; bytes <= (1ull << 32); bytes = bytes * 3 + 1) {
      EXPECT_GE(s.pieceCap(bytes, rounds), kMinPieceBytes) << bytes;
      EXPECT_LE(s.pieceCap(bytes, rounds), s.pieceMax) << bytes;
      EXPECT_EQ(s.pieceCap(bytes, rounds) % 16, 0u) << bytes;
    }
  }
  EXPECT_EQ(s.pieceCap(perPeer1G, kPairwiseRounds), s.pieceMax);  // 4 MiB a block: 13 rounds of the largest
}

TEST(PairHeaders, BothSidesAgreeExactlyWhenThePlansDo) {
  std::mt19937_64 rng(2211);
  for (int i = 0; i < 1000; ++i) {
    const PairView a{rng() % (1ull << 40), rng() % (1ull << 40), rng(), rng()};
    const PairView b{a.recv, a.send, a.recvSig, a.sendSig};  // the same pair from the other side
    EXPECT_EQ(checks(a, b), (std::array<bool, 2>{true, true}));
    // Any one quantity of b differing: both sides see it.
    for (int field = 0; field < 4; ++field) {
      PairView c = b;
      uint64_t& f = field == 0 ? c.send : field == 1 ? c.recv : field == 2 ? c.sendSig : c.recvSig;
      f += 1 + rng() % 1000;
      EXPECT_EQ(checks(a, c), (std::array<bool, 2>{false, false})) << "field " << field;
    }
    // b's two signatures swapped (the directions' operation sizes exchanged): both sides see it.
    const PairView d{b.send, b.recv, b.recvSig, b.sendSig};
    if (a.sendSig != a.recvSig) EXPECT_EQ(checks(a, d), (std::array<bool, 2>{false, false}));
  }
  // Zero bytes both ways (a pair that only meets): agree.
  const PairView z{0, 0, 7, 7};
  EXPECT_EQ(checks(z, z), (std::array<bool, 2>{true, true}));
}

}  // namespace
}  // namespace meshcomm::movement
