// Reading plan JSON: the text parsed with a nesting limit, and values read with their path so that every
// error names where in the document the value is.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_limits.hpp"
#include "plan/plan_error.hpp"
#include "plan/plan_format.hpp"

namespace meshcomm::plan::detail {

using json = nlohmann::json;

// Parses JSON text with the nesting limit of base/json_limits.hpp (a plan needs 9 levels); syntax errors and
// too deep nesting throw meshcomm::Error naming `planName`.
json parseJsonText(std::string_view text, const std::string& planName = "");

// planHash of an already parsed document (its canonical form: keys sorted, no whitespace).
uint64_t documentHash(const json& document);

// A JSON value of the plan and its path ("ranks[2].threadblocks[1]").
class Node {
 public:
  Node(const json& value, std::string path, const std::string& planName)
      : value_(value), path_(std::move(path)), planName_(planName) {}

  const json& value() const { return value_; }
  const std::string& path() const { return path_; }

  // Requires an object whose keys are exactly `keys`: names the first unknown or missing one.
  void expectKeys(const std::vector<std::string_view>& keys) const;
  // The member `key` of an object (missing: an error naming its path).
  Node member(const char* key) const;

  // Requires an array of at most `maxSize` elements; returns its size.
  size_t arraySize(size_t maxSize = SIZE_MAX) const;
  // Element `i` of an array.
  Node element(size_t i) const;

  // A non-negative integer in [minValue, maxValue].
  uint64_t toUnsigned(uint64_t minValue, uint64_t maxValue) const;
  int toInt(int minValue, int maxValue) const;
  bool toBool() const;
  std::string toString() const;

  // A name of `table` ("what": the kind of name, for the message).
  template <typename E>
  E toName(const std::vector<Named<E>>& table, const char* what) const {
    const std::string s = toString();
    for (const auto& n : table)
      if (s == n.name) return n.value;
    fail("unknown ", what, " ", describeJson(value_), " (known: ", namesOf(table), ")");
  }

  template <typename... Args>
  [[noreturn]] void fail(Args&&... args) const {
    failAt(planName_, path_, std::forward<Args>(args)...);
  }

 private:
  const json& value_;
  std::string path_;
  const std::string& planName_;
};

}  // namespace meshcomm::plan::detail
