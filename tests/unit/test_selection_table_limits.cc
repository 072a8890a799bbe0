// Selection-table input limits: deep nesting is rejected while parsing, and error messages built from huge
// values stay under kMaxErrorMessage (CPU only).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/bounded_text.hpp"
#include "base/json_limits.hpp"
#include "collectives/selection_plan.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/selector.hpp"
#include "error_text.hpp"

namespace meshcomm {
namespace {

constexpr size_t kHuge = 10 << 20;  // 10 MiB

std::string errorOf(const std::function<void()>& f) {
  return test::errorText(f);
}

std::string tableError(const std::string& text) {
  return errorOf([&] { Selector::fromJson(text); });
}

std::string nested(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(SelectionTableLimits, DeepNestingIsRejectedWhileParsing) {
  for (const std::string& text :
       {nested(100000), R"({"rules": [{"collective": "allreduce", "algorithm": )" + nested(100000) + "}]}",
        std::string(100000, '[')}) {
    const std::string message = tableError(text);
    EXPECT_NE(message.find("selection table: JSON nested deeper than 32 levels"), std::string::npos)
        << message;
  }
  // Within the limit, a value of the wrong kind is described, not dumped.
  const std::string message =
      tableError(R"({"rules": [{"collective": "allreduce", "algorithm": )" + nested(20) + "}]}");
  EXPECT_NE(message.find("rule 0: field 'algorithm': expected a string, got an array"), std::string::npos)
      << message;
}

TEST(SelectionTableLimits, HugeValuesGiveBoundedMessages) {
  const std::string huge(kHuge, 'x');
  const struct {
    std::string text;
    const char* expected;
  } cases[] = {
      {R"({"rules": [{"collective": ")" + huge + R"(", "algorithm": "a"}]})", "unknown collective 'xxx"},
      {R"({"rules": [{"collective": "allreduce", "algorithm": "a", ")" + huge + R"(": 1}]})",
       "unknown field"},
      {R"({"rules": [{"collective": "allreduce", "algorithm": "a", "dtype": ")" + huge + R"("}]})",
       "unknown dtype 'xxx"},
      {R"({"rules": [{"collective": "allreduce", "algorithm": "a", "blocks": ")" + huge + R"("}]})",
       "expected a non-negative integer, got \"xxx"},
      {R"({")" + huge + R"(": []})", "unknown top-level field 'xxx"},
      {R"({"rules": [")" + huge + R"("]})", "rule 0: expected an object, got \"xxx"},
      {R"({"rules": [{"collective": "allreduce", "algorithm": ")" + huge + "\n" + R"("}]})",
       "not valid JSON"},
      {std::string(kHuge, ' ') + "x", "not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string message = tableError(c.text);
    EXPECT_LT(message.size(), kMaxErrorMessage + 64) << message.substr(0, 200);
    EXPECT_NE(message.find(c.expected), std::string::npos) << message.substr(0, 400);
  }
}

TEST(SelectionTableLimits, HugeNamesAndPathsGiveBoundedMessages) {
  const std::string huge(kHuge, 'y');
  AlgorithmCollection none;
  const Selector s =
      Selector::fromJson(R"({"rules": [{"collective": "allreduce", "algorithm": ")" + huge + "\"}]}");
  const std::string unknown = errorOf([&] { SelectionPlan(s, none, {}); });
  EXPECT_LT(unknown.size(), kMaxErrorMessage + 64);
  EXPECT_NE(unknown.find("rule 0: field 'algorithm': unknown allreduce algorithm 'yyy"), std::string::npos)
      << unknown.substr(0, 400);
  const std::string missingFile = errorOf([&] { Selector::fromFile("/nonexistent/" + huge); });
  EXPECT_LT(missingFile.size(), kMaxErrorMessage + 64);
  EXPECT_NE(missingFile.find("cannot open"), std::string::npos) << missingFile.substr(0, 400);
  const std::string forced = errorOf([&] { parseForcedAlgorithms("allreduce" + huge); });
  EXPECT_LT(forced.size(), kMaxErrorMessage + 64);
  EXPECT_NE(forced.find("MESHCOMM_ALGO='allreduceyyy"), std::string::npos) << forced.substr(0, 400);
}

TEST(SelectionTableLimits, FileErrorsNameThePathWithinTheCap) {
  const std::string path = ::testing::TempDir() + "meshcomm_selection_table_huge.json";
  {
    std::ofstream(path) << R"({"rules": [{"collective": "allreduce", "algorithm": "a", "threads": ")"
                        << std::string(kHuge, 'z') << R"("}]})";
  }
  const std::string message = errorOf([&] { Selector::fromFile(path); });
  EXPECT_LT(message.size(), kMaxErrorMessage + 64);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("rule 0: field 'threads'"), std::string::npos) << message;
}

TEST(BoundedText, CutsLongTextAtACharacterBoundary) {
  EXPECT_EQ(boundedText("short"), "short");
  EXPECT_EQ(boundedText("abcdefgh", 4), "abcd... (8 bytes)");
  // "é" is two bytes; a cut inside it keeps the character whole or drops it.
  EXPECT_EQ(boundedText("abc\xc3\xa9xyz", 4), "abc... (8 bytes)");
  EXPECT_EQ(boundedText("abc\xc3\xa9xyz", 5), "abc\xc3\xa9... (8 bytes)");
}

TEST(JsonLimits, DescribesValuesWithoutDumpingThem) {
  using json = nlohmann::json;
  EXPECT_EQ(describeJson(json(3)), "3");
  EXPECT_EQ(describeJson(json(true)), "true");
  EXPECT_EQ(describeJson(json("ab")), "\"ab\"");
  EXPECT_EQ(describeJson(json::array({1, 2})), "an array");
  EXPECT_EQ(describeJson(json::object()), "an object");
  EXPECT_EQ(describeJson(json(std::string(1000, 'q'))), "\"" + std::string(40, 'q') + "\"...");
  EXPECT_EQ(describeJsonString("a\nb"), "\"a\\nb\"");
  // Depth counts the containers around a value: the innermost of 33 nested arrays is at depth 32.
  EXPECT_EQ(parseJsonLimited(nested(kMaxJsonDepth + 1), "ctx: ").size(), 1u);
  const std::string deeper = errorOf([] { parseJsonLimited(nested(kMaxJsonDepth + 2), "ctx: "); });
  EXPECT_NE(deeper.find("ctx: JSON nested deeper than 32 levels"), std::string::npos) << deeper;
}

}  // namespace
}  // namespace meshcomm
