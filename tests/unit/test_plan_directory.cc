// Plan directories (src/plan/plan_directory.hpp): which files load, in which order, the errors that name the
// directory and files, the set's hash, and the agreement across forked ranks (CPU only).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "error_text.hpp"
#include "forked_ranks.hpp"
#include "meshcomm/bootstrap.hpp"
#include "plan/plan_directory.hpp"
#include "test_files.hpp"

namespace meshcomm::plan {
namespace {

using test::errorText;

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(MESHCOMM_SOURCE_DIR) / "tests/python/dsl/golden";

// A fresh directory under the test's temporary directory.
fs::path freshDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("meshcomm-plan-dir-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// `dir` holding the golden plans `names` (as <name>.json) and a file that is not a plan.
fs::path dirWith(const std::string& label, const std::vector<std::string>& names) {
  const fs::path dir = freshDir(label);
  for (const auto& name : names) fs::copy_file(kGolden / (name + ".r4.json"), dir / (name + ".json"));
  write(dir / "README.txt", "not a plan");
  return dir;
}

std::vector<std::string> namesOf(const std::vector<std::shared_ptr<PlanAlgorithm>>& plans) {
  std::vector<std::string> names;
  for (const auto& p : plans) names.push_back(p->name());
  return names;
}

TEST(PlanDirectory, LoadsTheJsonFilesInNameOrder) {
  const fs::path dir = dirWith("order", {"allreduce_twoshot", "allgather_fullmesh", "alltoall_allpairs_ll"});
  const auto plans = loadPlanDirectory(dir.string());
  EXPECT_EQ(namesOf(plans),
            (std::vector<std::string>{"allgather_fullmesh", "allreduce_twoshot", "alltoall_allpairs_ll"}));
  EXPECT_EQ(plans[1]->plan().numRanks, 4);
  fs::remove_all(dir);
}

TEST(PlanDirectory, AnEmptyDirectoryHasNoPlans) {
  const fs::path dir = dirWith("empty", {});
  EXPECT_TRUE(loadPlanDirectory(dir.string()).empty());
  fs::remove_all(dir);
}

TEST(PlanDirectory, ErrorsNameTheDirectoryAndFiles) {
  const std::string missing = (fs::temp_directory_path() / "meshcomm-no-such-plan-dir").string();
  EXPECT_NE(errorText([&] {
              loadPlanDirectory(missing);
            }).find("MESHCOMM_PLAN_DIR '" + missing + "' is not a directory"),
            std::string::npos);

  const fs::path dir = dirWith("bad", {"allreduce_twoshot"});
  write(dir / "broken.json", "{\"format\": ");
  const std::string bad = errorText([&] { loadPlanDirectory(dir.string()); });
  EXPECT_NE(bad.find("plan file '" + (dir / "broken.json").string() + "'"), std::string::npos) << bad;

  fs::remove(dir / "broken.json");
  fs::copy_file(kGolden / "allreduce_twoshot.r4.json", dir / "copy.json");
  const std::string twice = errorText([&] { loadPlanDirectory(dir.string()); });
  EXPECT_NE(twice.find("plan name 'allreduce_twoshot' in both '" + (dir / "allreduce_twoshot.json").string() +
                       "' and '" + (dir / "copy.json").string() + "'"),
            std::string::npos)
      << twice;
  fs::remove_all(dir);
}

TEST(PlanDirectory, TooManyFilesAreRefused) {
  const fs::path dir = freshDir("many");
  const std::string plan = test::readFile(kGolden / "allgather_fullmesh.r4.json");
  for (size_t i = 0; i <= kMaxPlanFiles; ++i) write(dir / ("p" + std::to_string(i) + ".json"), plan);
  EXPECT_NE(errorText([&] { loadPlanDirectory(dir.string()); }).find("holds more than 256 plan files"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(PlanDirectory, TheSetHashFollowsNamesPlansAndOrder) {
  const fs::path a = dirWith("hash-a", {"allreduce_twoshot", "allgather_fullmesh"});
  const fs::path b = dirWith("hash-b", {"allreduce_twoshot"});
  const uint64_t h = planSetHash(loadPlanDirectory(a.string()));
  EXPECT_EQ(h, planSetHash(loadPlanDirectory(a.string())));
  EXPECT_NE(h, planSetHash(loadPlanDirectory(b.string())));
  EXPECT_NE(h, planSetHash({}));
  auto plans = loadPlanDirectory(a.string());
  std::swap(plans[0], plans[1]);
  EXPECT_NE(h, planSetHash(plans));
  fs::remove_all(a);
  fs::remove_all(b);
}

// Ranks 0 and 1 find two plans, rank 2 one: every rank fails naming the ranks whose plans differ; without
// MESHCOMM_PLAN_DIR anywhere every rank agrees on no plans.
TEST(PlanDirectory, ForkedRanksAgreeOnTheirPlans) {
  const fs::path two = dirWith("ranks-two", {"allreduce_twoshot", "allgather_fullmesh"});
  const fs::path one = dirWith("ranks-one", {"allreduce_twoshot"});
  const int n = 3;
  test::expectAllSucceeded(test::runRanks(n, test::loopbackId(), [&](int rank, const UniqueId& id) {
    TcpBootstrap boot(rank, n, id, 20);
    unsetenv("MESHCOMM_PLAN_DIR");
    RANK_CHECK(loadAgreedPlanDirectory(boot).empty());
    setenv("MESHCOMM_PLAN_DIR", (rank < 2 ? two : one).c_str(), 1);
    const Error e = test::expectError([&] { loadAgreedPlanDirectory(boot); }, "loadAgreedPlanDirectory");
    const std::string others =
        rank < 2 ? "rank 2 did not load the plans" : "ranks 0, 1 did not load the plans";
    RANK_CHECK(test::contains(e.what(), "rank " + std::to_string(rank) + ": plan directory agreement"),
               e.what());
    RANK_CHECK(test::contains(e.what(), others), e.what());
    RANK_CHECK(test::contains(e.what(), "give every rank the same MESHCOMM_PLAN_DIR contents"), e.what());
  }));
  fs::remove_all(two);
  fs::remove_all(one);
}

}  // namespace
}  // namespace meshcomm::plan
