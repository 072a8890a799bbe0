// Reading plan JSON with paths: parsing with the shared nesting limit, typed reads whose errors name the
// value's path.
#include "plan/plan_json.hpp"

#include <algorithm>

namespace meshcomm::plan::detail {

json parseJsonText(std::string_view text, const std::string& planName) {
  return parseJsonLimited(text, planPrefix(planName));
}

void Node::expectKeys(const std::vector<std::string_view>& keys) const {
  if (!value_.is_object()) fail("expected an object, got ", describeJson(value_));
  for (const auto& item : value_.items())
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end())
      failAt(planName_, memberPath(path_, item.key()), "unknown key");
  for (const auto key : keys)
    if (!value_.contains(key)) failAt(planName_, memberPath(path_, std::string(key)), "missing");
}

Node Node::member(const char* key) const {
  if (!value_.is_object()) fail("expected an object, got ", describeJson(value_));
  const auto it = value_.find(key);
  if (it == value_.end()) failAt(planName_, memberPath(path_, key), "missing");
  return Node(*it, memberPath(path_, key), planName_);
}

size_t Node::arraySize(size_t maxSize) const {
  if (!value_.is_array()) fail("expected an array, got ", describeJson(value_));
  if (value_.size() > maxSize) fail(value_.size(), " entries, at most ", maxSize, " allowed");
  return value_.size();
}

Node Node::element(size_t i) const {
  return Node(value_.at(i), elementPath(path_, i), planName_);
}

uint64_t Node::toUnsigned(uint64_t minValue, uint64_t maxValue) const {
  if (!value_.is_number_integer()) fail("expected a non-negative integer, got ", describeJson(value_));
  if (!value_.is_number_unsigned() && value_.get<int64_t>() < 0)
    fail("must not be negative, got ", describeJson(value_));
  const uint64_t x = value_.get<uint64_t>();
  if (x < minValue || x > maxValue) fail(x, " is outside ", minValue, "..", maxValue);
  return x;
}

int Node::toInt(int minValue, int maxValue) const {
  return static_cast<int>(toUnsigned(static_cast<uint64_t>(minValue), static_cast<uint64_t>(maxValue)));
}

bool Node::toBool() const {
  if (!value_.is_boolean()) fail("expected true or false, got ", describeJson(value_));
  return value_.get<bool>();
}

std::string Node::toString() const {
  if (!value_.is_string()) fail("expected a string, got ", describeJson(value_));
  return value_.get<std::string>();
}

}  // namespace meshcomm::plan::detail
