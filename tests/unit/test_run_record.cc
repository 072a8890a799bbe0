// The tools' run record (tools/run_record.hpp): the facts every benchmark JSON carries, as JSON values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include "run_record.hpp"

namespace meshcomm::tools {
namespace {

TEST(RunRecord, CarriesToolDateDeviceRanksCommitAndCommand) {
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

TEST(RunRecord, MissingMeasurementsAreNull) {
  EXPECT_TRUE(numberOrNull(std::nan("")).is_null());
  EXPECT_EQ(numberOrNull(2.5), 2.5);
}

}  // namespace
}  // namespace meshcomm::tools
