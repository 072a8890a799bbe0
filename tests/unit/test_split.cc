// splitMembers / shareUniqueId (include/meshcomm/split.hpp) across forked ranks on loopback: NCCL's split
// semantics (colors, keys, no-color ranks), a disagreement on the member list failing every member of that
// color alike, and the subgroup's UniqueId reaching exactly its members, which can then build a bootstrap.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "forked_ranks.hpp"
#include "meshcomm/split.hpp"

namespace meshcomm {
namespace {

using namespace test;

std::string listText(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + " ";
  return s;
}

TEST(Split, MembersFollowColorsAndKeysAndNoColorRanksGetNone) {
  const int n = 6;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id);
    // Colors: ranks 0, 2, 4 → color 7 with keys reversed; ranks 1, 3 → color 1; rank 5 joins none.
    SplitRequest request;
    if (rank == 5) {
      request.color = kSplitNoColor;
    } else if (rank % 2 == 0) {
      request = {7, 10 - rank, 0};
    } else {
      request = {1, 0, 0};  // equal keys: parent order
    }
    const std::vector<int> members = splitMembers(boot, request);
    std::vector<int> expected;
    if (rank == 5)
      expected = {};
    else if (rank % 2 == 0)
      expected = {4, 2, 0};
    else
      expected = {1, 3};
    RANK_CHECK(members == expected, "rank ", rank, " got ", listText(members));
    if (members.empty()) return;
    // The subgroup's id reaches every member, and only them: they build a bootstrap on it.
    const UniqueId sub = shareUniqueId(boot, members);
    const int newRank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    TcpBootstrap child(newRank, static_cast<int>(members.size()), sub);
    std::vector<int> parents(members.size());
    parents[newRank] = rank;
    child.allGather(parents.data(), sizeof(int));
    RANK_CHECK(parents == members, "rank ", rank, " child allGather ", listText(parents));
  }));
}

TEST(Split, DisagreeingMembersFailAllTogetherNamingTheRanks) {
  const int n = 4;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id);
    // Every rank asks for color 0, but rank 3 passed another member list (another signature).
    const SplitRequest request{0, rank, rank == 3 ? 99u : 42u};
    const Error e = expectError([&] { splitMembers(boot, request); }, "splitMembers");
    RANK_CHECK(e.code() == ErrorCode::InvalidUsage);
    RANK_CHECK(
        contains(e.what(), "rank " + std::to_string(rank) + ": split: the members of color 0 disagree"),
        e.what());
    RANK_CHECK(contains(e.what(), "ranks 0, 1, 2 asked for one, ranks 3 for another") ||
                   contains(e.what(), "ranks 3 asked for one, ranks 0, 1, 2 for another"),
               e.what());
    // The parent bootstrap is still in step: a barrier completes on every rank.
    boot.barrier();
  }));
}

TEST(Split, ABadColorFailsOnItsRankAfterTheExchange) {
  const int n = 3;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id);
    if (rank == 1) {
      const Error e = expectError([&] { splitMembers(boot, {-5, 0, 0}); }, "splitMembers");
      RANK_CHECK(contains(e.what(), "rank 1: split: color -5 must be >= 0 or kSplitNoColor"), e.what());
    } else {
      const std::vector<int> members = splitMembers(boot, {3, 0, 0});
      RANK_CHECK(members == (std::vector<int>{0, 2}), listText(members));
    }
    boot.barrier();
  }));
}

TEST(Split, ShareUniqueIdRejectsACallerOutsideTheMembers) {
  expectAllSucceeded(runRanks(2, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, 2, id);
    const std::vector<int> others{1 - rank};
    const Error e = expectError([&] { shareUniqueId(boot, others); }, "shareUniqueId");
    RANK_CHECK(contains(e.what(), "this rank is not among the members"), e.what());
  }));
}

}  // namespace
}  // namespace meshcomm
