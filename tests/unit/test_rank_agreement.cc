// Agreement across ranks (the selection table's, the generic digest check): the canonical hash, the digest
// check, and the all-gather over a bootstrap of forked ranks (CPU only).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/bounded_text.hpp"
#include "collectives/rank_agreement.hpp"
#include "forked_ranks.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"
#include "error_text.hpp"

namespace meshcomm {
namespace {

using test::errorText;

using namespace test;

const char* const kTable = R"({"rules": [{"collective": "allreduce", "algorithm": "a", "max_bytes": 4096}]})";
const char* const kOtherTable = R"({"rules": [{"collective": "allreduce", "algorithm": "b"}]})";

TEST(TableAgreement, HashIsOfTheCanonicalForm) {
  const uint64_t h = selectionTableHash(Selector::fromJson(kTable));
  // Layout, field order and spelled-out defaults do not change the hash; a different rule does.
  EXPECT_EQ(h, selectionTableHash(Selector::fromJson(R"({"rules":[
    {"max_bytes":4096, "min_bytes": 0, "algorithm":"a","collective":"allreduce"}]})")));
  EXPECT_NE(h, selectionTableHash(Selector::fromJson(kOtherTable)));
  EXPECT_NE(h, selectionTableHash(Selector()));
}

TEST(TableAgreement, EqualDigestsPass) {
  const AgreementDigest d{42, 1};
  EXPECT_NO_THROW(checkDigests(1, {d, d, d}, kSelectionTableAgreement));
}

TEST(TableAgreement, DifferingRanksAreNamed) {
  const AgreementDigest a{0x1f, 1}, b{0x2e, 1}, failed{0, 0};
  const std::string at0 = errorText([&] { checkDigests(0, {a, a, b, failed}, kSelectionTableAgreement); });
  EXPECT_NE(at0.find("rank 0: selection table agreement: ranks 2, 3 did not load the table this rank loaded"),
            std::string::npos)
      << at0;
  EXPECT_NE(at0.find("hash 0x1f on ranks 0, 1; hash 0x2e on rank 2; could not load it on rank 3"),
            std::string::npos)
      << at0;
  const std::string at2 = errorText([&] { checkDigests(2, {a, a, b, failed}, kSelectionTableAgreement); });
  EXPECT_NE(at2.find("rank 2: selection table agreement: ranks 0, 1, 3 did not load"), std::string::npos)
      << at2;
}

TEST(TableAgreement, ManyRanksGiveABoundedMessage) {
  std::vector<AgreementDigest> digests(100000, AgreementDigest{1, 1});
  for (size_t r = 0; r < digests.size(); r += 2) digests[r].hash = r;
  const std::string message = errorText([&] { checkDigests(1, digests, kSelectionTableAgreement); });
  EXPECT_LT(message.size(), kMaxErrorMessage + 64);
}

// Ranks 2 and 3 load another table: every rank fails, naming the ranks whose table differs from its own.
TEST(TableAgreement, ForkedRanksReportTheRanksThatDiffer) {
  const int n = 4;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    const char* text = rank < 2 ? kTable : kOtherTable;
    const Error e = expectError([&] { loadAgreedSelector(boot, [&] { return Selector::fromJson(text); }); },
                                "loadAgreedSelector");
    const std::string others = rank < 2 ? "ranks 2, 3 did not load" : "ranks 0, 1 did not load";
    RANK_CHECK(contains(e.what(), "rank " + std::to_string(rank) + ": selection table agreement"), e.what());
    RANK_CHECK(contains(e.what(), others), e.what());
  }));
}

// Rank 1 cannot load its table: it reports its own load error, the others name it; nobody waits forever.
TEST(TableAgreement, ForkedRanksReportARankThatCouldNotLoad) {
  const int n = 3;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    const Error e = expectError(
        [&] { loadAgreedSelector(boot, [&] { return Selector::fromJson(rank == 1 ? "{" : kTable); }); },
        "loadAgreedSelector");
    if (rank == 1) {
      RANK_CHECK(contains(e.what(), "rank 1: creating the Comm: selection table: not valid JSON"), e.what());
    } else {
      RANK_CHECK(contains(e.what(), "rank 1 did not load"), e.what());
      RANK_CHECK(contains(e.what(), "could not load it on rank 1"), e.what());
    }
  }));
}

TEST(TableAgreement, ForkedRanksWithTheSameTableAgree) {
  const int n = 3;
  expectAllSucceeded(runRanks(n, loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    // The same rules, laid out differently on each rank.
    const std::string text = rank == 0 ? kTable : R"({"rules": [{"algorithm": "a", "max_bytes": 4096,
                                             "collective": "allreduce"}]})";
    const Selector s = loadAgreedSelector(boot, [&] { return Selector::fromJson(text); });
    RANK_CHECK(s.rules().size() == 1u);
  }));
}

}  // namespace
}  // namespace meshcomm
