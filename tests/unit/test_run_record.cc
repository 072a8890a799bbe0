// The tools' run record (tools/run_record.hpp): the facts every benchmark JSON carries, as JSON values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>

#include "run_record.hpp"

namespace meshcomm::tools {
namespace {

// Sets an environment variable for one scope, restoring the previous value (or its absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(RunRecord, CarriesToolDateDeviceRanksCommitAndCommand) {
  const ScopedEnv noOverride("MESHCOMM_BENCH_COMMIT", nullptr);
  char a0[] = "meshcomm-bench", a1[] = "-b", a2[] = "8";
  char* argv[] = {a0, a1, a2};
  const std::string command = commandLine(3, argv);
  EXPECT_EQ(command, "meshcomm-bench -b 8");
  const nlohmann::json j = runRecord("meshcomm-bench", "NVIDIA H100 \"80GB\"", 4, command);
  EXPECT_EQ(j["tool"], "meshcomm-bench");
  EXPECT_TRUE(std::regex_match(j["date"].get<std::string>(), std::regex(R"(\d{4}-\d{2}-\d{2})")));
  EXPECT_EQ(j["device"], "NVIDIA H100 \"80GB\"");  // quotes stay data: the dump escapes them
  EXPECT_EQ(j["ranks"], 4);
  EXPECT_EQ(j["command"], "meshcomm-bench -b 8");
  // In a git checkout: a short hash, "+changes" for a dirty tree; in an exported tree: "unknown".
  const bool checkout = std::filesystem::exists(std::filesystem::path(MESHCOMM_SOURCE_DIR) / ".git");
  EXPECT_TRUE(std::regex_match(j["commit"].get<std::string>(),
                               std::regex(checkout ? R"([0-9a-f]{7,}(\+changes)?)" : "unknown")))
      << j["commit"];
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

// A copy of the tree without the measured commit's git metadata (a GPU machine's) names the commit.
TEST(RunRecord, TheCommitVariableNamesTheMeasuredCommit) {
  {
    const ScopedEnv given("MESHCOMM_BENCH_COMMIT", "6a7e59a+table");
    EXPECT_EQ(runRecord("meshcomm-bench", "dev", 2, "cmd")["commit"], "6a7e59a+table");
  }
  const ScopedEnv empty("MESHCOMM_BENCH_COMMIT", "");
  EXPECT_NE(runRecord("meshcomm-bench", "dev", 2, "cmd")["commit"], "");
}

TEST(RunRecord, MissingMeasurementsAreNull) {
  EXPECT_TRUE(numberOrNull(std::nan("")).is_null());
  EXPECT_EQ(numberOrNull(2.5), 2.5);
}

}  // namespace
}  // namespace meshcomm::tools
