// Layout rules of the stream engine's region (engine_streams.cuh): every receiver has the same number of
// lanes, a pair has the same lane count in both directions, chain neighbours get every lane, and the
// pairwise engine's blocks per peer fit every pair.
#include <gtest/gtest.h>

#include "collectives/algorithms/engine_streams.cuh"

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
