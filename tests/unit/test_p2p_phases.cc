// p2p_phases.hpp: where a point-to-point group splits into consecutive launches.
#include "collectives/p2p_phases.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace meshcomm {
namespace {

constexpr size_t kChunk = 4096;

void* at(size_t chunk) {
  return reinterpret_cast<void*>(uintptr_t{1} << 40 | chunk * kChunk);
}
P2POp send(int peer, size_t chunk, size_t chunks) {
  return P2POp{P2POp::Send, peer, at(chunk), chunks * kChunk};
}
P2POp recv(int peer, size_t chunk, size_t chunks) {
  return P2POp{P2POp::Recv, peer, at(chunk), chunks * kChunk};
}
// The first operation of every phase (0 first), from p2pPhaseBoundaries.
std::vector<size_t> starts(const std::vector<P2POp>& ops, int nRanks) {
  std::vector<size_t> s{0};
  for (size_t b : p2pPhaseBoundaries(ops.data(), ops.size(), nRanks)) s.push_back(b);
  return s;
}

// nccl-tests' hypercube as one group (its -g mode): step k sends the 2^k chunks gathered so far to
// rank ^ 2^k, which needs the receives of the steps before it.
std::vector<P2POp> hypercubeGroup(int rank, int nRanks) {
  std::vector<P2POp> ops;
  for (int mask = 1; mask < nRanks; mask <<= 1) {
    const int s = rank & ~(mask - 1), r = s ^ mask;
    ops.push_back(send(rank ^ mask, static_cast<size_t>(s), static_cast<size_t>(mask)));
    ops.push_back(recv(rank ^ mask, static_cast<size_t>(r), static_cast<size_t>(mask)));
  }
  return ops;
}

TEST(P2PPhases, HypercubeStepsRunInOrder) {
  for (int n : {2, 4, 8}) {
    for (int rank = 0; rank < n; ++rank) {
      std::vector<size_t> want;
      for (size_t step = 0; (1 << step) < n; ++step) want.push_back(2 * step);
      EXPECT_EQ(starts(hypercubeGroup(rank, n), n), want) << "n " << n << " rank " << rank;
    }
  }
}

TEST(P2PPhases, IndependentOperationsStayOneLaunch) {
  // alltoall-shaped: sends from one buffer, receives into another.
  std::vector<P2POp> ops;
  for (int p = 0; p < 4; ++p) {
    ops.push_back(send(p, static_cast<size_t>(p), 1));
    ops.push_back(recv(p, 16 + static_cast<size_t>(p), 1));
  }
  EXPECT_EQ(starts(ops, 4), std::vector<size_t>{0});
  // A send before a receive into the same bytes (write after read) is not a split either: in-place
  // alltoall as grouped send/recv keeps one launch.
  EXPECT_EQ(starts({send(1, 0, 1), recv(1, 0, 1), send(2, 1, 1), recv(2, 1, 1)}, 4), std::vector<size_t>{0});
  // Receives only, sends only.
  EXPECT_EQ(starts({recv(1, 0, 2), recv(2, 1, 2)}, 4), std::vector<size_t>{0});
  EXPECT_EQ(starts({send(1, 0, 2), send(2, 1, 2)}, 4), std::vector<size_t>{0});
}

TEST(P2PPhases, OverlapIsByBytes) {
  // The send starts at the last byte the receive writes: dependent. One byte later: independent.
  const P2POp r = recv(1, 0, 1);
  P2POp s{P2POp::Send, 2, static_cast<char*>(at(1)) - 1, kChunk};
  EXPECT_EQ(starts({r, s}, 4), (std::vector<size_t>{0, 1}));
  s.buffer = at(1);
  EXPECT_EQ(starts({r, s}, 4), std::vector<size_t>{0});
  // A send covering a receive from the inside of a larger range; merged neighbouring receives.
  EXPECT_EQ(starts({recv(1, 3, 1), send(2, 0, 8)}, 4), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(starts({recv(1, 0, 1), recv(3, 1, 1), send(2, 1, 1)}, 4), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(starts({recv(1, 4, 1), recv(3, 0, 1), send(2, 2, 2)}, 4), std::vector<size_t>{0});
}

TEST(P2PPhases, APeerInTwoPhasesKeepsOneLaunch) {
  // Echo: receive from 1, send it back to 1. Splitting would put the pair into two launches on this
  // side and one on the peer's: the group keeps NCCL's semantics instead.
  EXPECT_EQ(starts({recv(1, 0, 1), send(1, 0, 1)}, 2), std::vector<size_t>{0});
  // The same through the rank itself.
  EXPECT_EQ(starts({recv(0, 6, 1), recv(1, 0, 1), send(2, 0, 1), send(0, 5, 1)}, 3), std::vector<size_t>{0});
  EXPECT_EQ(starts({send(0, 5, 1), recv(1, 0, 1), recv(0, 6, 1), send(2, 0, 1)}, 3),
            (std::vector<size_t>{0, 3}));
  // A later phase returning to a peer of an earlier one.
  EXPECT_EQ(starts({recv(1, 0, 1), send(2, 0, 1), recv(2, 1, 1), send(1, 1, 1)}, 3), std::vector<size_t>{0});
}

TEST(P2PPhases, ForwardingSplitsWhereThePeersDiffer) {
  // Receive from the previous rank, forward to the next: two phases (a ring of such groups waits for the
  // device timeout, see p2p_phases.hpp).
  EXPECT_EQ(starts({recv(0, 0, 1), send(2, 0, 1)}, 3), (std::vector<size_t>{0, 1}));
  // Later receives join the phase of the send; a send that depends on a receive of an earlier phase only
  // does not split again.
  EXPECT_EQ(starts({recv(0, 0, 1), send(2, 0, 1), recv(3, 1, 1), send(4, 0, 1)}, 5),
            (std::vector<size_t>{0, 1}));
}

}  // namespace
}  // namespace meshcomm
