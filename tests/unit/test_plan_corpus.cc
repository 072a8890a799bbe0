// The plan fuzzer's seed corpus (tests/fuzz/corpus/plan) through parsePlan: valid_*.json seeds load,
// invalid_*.json seeds are rejected with a plan error, and nothing else is thrown (CPU only).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "meshcomm/errors.hpp"
#include "test_files.hpp"
#include "meshcomm/plan.hpp"

namespace meshcomm::plan {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(MESHCOMM_SOURCE_DIR) / "tests/fuzz/corpus/plan";

std::vector<fs::path> seedsStartingWith(const std::string& prefix) {
  return test::filesStartingWith(kCorpus, prefix);
}

std::string readSeed(const fs::path& path) {
  return test::readFile(path);
}

TEST(PlanCorpus, ValidSeedsLoad) {
  const auto seeds = seedsStartingWith("valid_");
  ASSERT_GE(seeds.size(), 3u) << kCorpus;
  for (const auto& seed : seeds) {
    const std::string text = readSeed(seed);
    EXPECT_NO_THROW({
      const Plan plan = parsePlan(text);
      EXPECT_EQ(plan.ranks.size(), static_cast<size_t>(plan.numRanks)) << seed;
    }) << seed;
  }
}

// The plans meshcomm.dsl compiles from the shipped programs (tests/python/dsl/golden) load here unchanged:
// the Python compiler and the C++ loader agree on the format.
TEST(PlanCorpus, TheDslGoldenPlansLoad) {
  const fs::path golden = fs::path(MESHCOMM_SOURCE_DIR) / "tests/python/dsl/golden";
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(golden)) {
    if (entry.path().extension() != ".json") continue;
    const Plan plan = parsePlan(readSeed(entry.path()));
    EXPECT_EQ(plan.numRanks, 4) << entry.path();
    EXPECT_EQ(entry.path().filename().string().rfind(plan.name + ".r4", 0), 0u) << entry.path();
    size_t ops = 0;
    for (const auto& rank : plan.ranks)
      for (const auto& tb : rank.threadblocks) ops += tb.ops.size();
    EXPECT_GT(ops, 0u) << entry.path();
    ++loaded;
  }
  EXPECT_GE(loaded, 7) << golden;
}

TEST(PlanCorpus, InvalidSeedsAreRejected) {
  const auto seeds = seedsStartingWith("invalid_");
  ASSERT_GE(seeds.size(), 10u) << kCorpus;
  for (const auto& seed : seeds) {
    try {
      parsePlan(readSeed(seed));
      ADD_FAILURE() << seed << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << seed;
      EXPECT_EQ(std::string(e.what()).rfind("invalid usage: plan", 0), 0u) << seed << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace meshcomm::plan
