// The selection-table fuzzer's seed corpus (tests/fuzz/corpus/selection) through Selector::fromJson:
// valid_*.json seeds load and keep their canonical form, invalid_*.json seeds are rejected with a selection
// table error, and nothing else is thrown (CPU only).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "meshcomm/errors.hpp"
#include "test_files.hpp"
#include "meshcomm/selector.hpp"

namespace meshcomm {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(MESHCOMM_SOURCE_DIR) / "tests/fuzz/corpus/selection";

std::vector<fs::path> seedsStartingWith(const std::string& prefix) {
  return test::filesStartingWith(kCorpus, prefix);
}

std::string readSeed(const fs::path& path) {
  return test::readFile(path);
}

TEST(SelectionCorpus, ValidSeedsLoad) {
  const auto seeds = seedsStartingWith("valid_");
  ASSERT_GE(seeds.size(), 3u) << kCorpus;
  for (const auto& seed : seeds) {
    EXPECT_NO_THROW({
      const std::string canonical = Selector::fromJson(readSeed(seed)).toJson();
      EXPECT_EQ(Selector::fromJson(canonical).toJson(), canonical) << seed;
    }) << seed;
  }
}

TEST(SelectionCorpus, InvalidSeedsAreRejected) {
  const auto seeds = seedsStartingWith("invalid_");
  ASSERT_GE(seeds.size(), 10u) << kCorpus;
  for (const auto& seed : seeds) {
    try {
      Selector::fromJson(readSeed(seed));
      ADD_FAILURE() << seed << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << seed;
      EXPECT_EQ(std::string(e.what()).rfind("invalid usage: selection table: ", 0), 0u)
          << seed << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace meshcomm
