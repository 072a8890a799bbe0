// Selector: JSON tables in and out, and selection through a SelectionPlan.
#include "meshcomm/selector.hpp"

#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/bounded_file.hpp"
#include "base/bounded_text.hpp"
#include "base/error_message.hpp"
#include "base/json_limits.hpp"
#include "collectives/selection_plan.hpp"
#include "collectives/selection_table_error.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

using json = nlohmann::json;

// Context of one field for error messages: "selection table: rule 3: field 'dtype': ...".
struct FieldRef {
  size_t rule;
  std::string_view field;
};

template <typename... Args>
[[noreturn]] void fail(const FieldRef& f, Args&&... args) {
  failRuleField(f.rule, f.field, std::forward<Args>(args)...);
}

uint64_t readUnsigned(const json& v, const FieldRef& f, uint64_t maxValue) {
  if (!v.is_number_integer()) fail(f, "expected a non-negative integer, got ", describeJson(v));
  if (!v.is_number_unsigned()) fail(f, "must not be negative, got ", describeJson(v));
  const uint64_t x = v.get<uint64_t>();
  if (x > maxValue) fail(f, "value ", x, " exceeds ", maxValue);
  return x;
}

bool readBool(const json& v, const FieldRef& f) {
  if (!v.is_boolean()) fail(f, "expected true or false, got ", describeJson(v));
  return v.get<bool>();
}

std::string readString(const json& v, const FieldRef& f) {
  if (!v.is_string()) fail(f, "expected a string, got ", describeJson(v));
  return v.get<std::string>();
}

Collective readCollective(const json& v, const FieldRef& f) {
  const std::string s = readString(v, f);
  std::string known;
  for (int i = 0; i < kNumCollectives; ++i) {
    const auto c = static_cast<Collective>(i);
    if (s == collectiveName(c)) return c;
    known += (i ? ", " : "") + std::string(collectiveName(c));
  }
  fail(f, "unknown collective ", quotedName(s), " (known: ", known, ")");
}

DataType readDataType(const json& v, const FieldRef& f) {
  const std::string s = readString(v, f);
  std::string known;
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    if (s == dataTypeName(t)) return t;
    known += (i ? ", " : "") + std::string(dataTypeName(t));
  }
  fail(f, "unknown dtype ", quotedName(s), " (known: ", known, ")");
}

void readField(SelectorRule& r, const std::string& key, const json& v, size_t index) {
  const FieldRef f{index, key};
  if (key == "collective") {
    r.collective = readCollective(v, f);
  } else if (key == "algorithm") {
    r.algorithm = readString(v, f);
    if (r.algorithm.empty()) fail(f, "must not be empty");
  } else if (key == "min_bytes") {
    r.minBytes = readUnsigned(v, f, SIZE_MAX);
  } else if (key == "max_bytes") {
    r.maxBytes = readUnsigned(v, f, SIZE_MAX);
  } else if (key == "world_size") {
    r.worldSize = static_cast<int>(readUnsigned(v, f, INT_MAX));
    if (r.worldSize == 0) fail(f, "must be positive (omit the field to match any world size)");
  } else if (key == "dtype") {
    r.dtype = readDataType(v, f);
  } else if (key == "in_place") {
    r.inPlace = readBool(v, f);
  } else if (key == "capturing") {
    r.capturing = readBool(v, f);
  } else if (key == "blocks") {
    r.config.nBlocks = static_cast<int>(readUnsigned(v, f, INT_MAX));
  } else if (key == "threads") {
    r.config.nThreadsPerBlock = static_cast<int>(readUnsigned(v, f, 1024));
  } else {
    fail(f,
         "unknown field (known: collective, algorithm, min_bytes, max_bytes, world_size, dtype, in_place, "
         "capturing, blocks, threads)");
  }
}

// Checks that a rule (parsed or built by a tool) can be applied the same way on every rank.
void checkRule(const SelectorRule& r, size_t index) {
  if (r.minBytes > r.maxBytes) {
    fail({index, "min_bytes"}, "min_bytes ", r.minBytes, " is larger than max_bytes ", r.maxBytes);
  }
  if (sizeIsRankLocal(r.collective) &&
      (r.minBytes != 0 || r.maxBytes != std::numeric_limits<size_t>::max())) {
    fail({index, "min_bytes"}, collectiveName(r.collective),
         " rules cannot bound the size: each rank sees its own size, and all ranks must pick the same "
         "algorithm and launch configuration");
  }
}

SelectorRule parseRule(const json& j, size_t index) {
  if (!j.is_object()) failTable("rule ", index, ": expected an object, got ", describeJson(j));
  for (const char* required : {"collective", "algorithm"}) {
    if (!j.contains(required)) fail({index, required}, "missing (required)");
  }
  SelectorRule r;
  for (auto it = j.begin(); it != j.end(); ++it) readField(r, it.key(), it.value(), index);
  checkRule(r, index);
  return r;
}

json ruleToJson(const SelectorRule& r) {
  json j = json::object();
  j["collective"] = collectiveName(r.collective);
  j["algorithm"] = r.algorithm;
  if (r.minBytes != 0) j["min_bytes"] = r.minBytes;
  if (r.maxBytes != SIZE_MAX) j["max_bytes"] = r.maxBytes;
  if (r.worldSize != 0) j["world_size"] = r.worldSize;
  if (r.dtype) j["dtype"] = dataTypeName(*r.dtype);
  if (r.inPlace) j["in_place"] = *r.inPlace;
  if (r.capturing) j["capturing"] = *r.capturing;
  if (r.config.nBlocks != 0) j["blocks"] = r.config.nBlocks;
  if (r.config.nThreadsPerBlock != 0) j["threads"] = r.config.nThreadsPerBlock;
  return j;
}

}  // namespace

Selector::Selector(std::vector<SelectorRule> rules) : rules_(std::move(rules)) {
  for (size_t i = 0; i < rules_.size(); ++i) checkRule(rules_[i], i);
}

Selector Selector::fromJson(const std::string& text) {
  const json doc = parseJsonLimited(text, "selection table: ");
  if (!doc.is_object()) failTable("expected an object, got ", describeJson(doc));
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != "rules")
      failTable("unknown top-level field ", quotedName(it.key()), " (expected only 'rules')");
  }
  if (!doc.contains("rules") || !doc["rules"].is_array()) failTable("'rules' must be present and an array");
  std::vector<SelectorRule> rules;
  const json& list = doc["rules"];
  for (size_t i = 0; i < list.size(); ++i) rules.push_back(parseRule(list[i], i));
  return Selector(std::move(rules));
}

Selector Selector::fromFile(const std::string& path) {
  std::string text;
  try {
    text = readBoundedFile(path, "selection table");
  } catch (const Error& e) {  // a table that cannot be read is the caller's setting: InvalidUsage
    throw Error(ErrorCode::InvalidUsage, messageOf(e));
  }
  try {
    return fromJson(text);
  } catch (const Error& e) {
    throw Error(ErrorCode::InvalidUsage,
                boundedText(quotedPath(path) + ": " + messageOf(e), kMaxErrorMessage));
  }
}

std::string Selector::toJson() const {
  json list = json::array();
  for (const auto& r : rules_) list.push_back(ruleToJson(r));
  json doc = json::object();
  doc["rules"] = std::move(list);
  return doc.dump(2);
}

Selection Selector::select(const CollectiveArgs& args, const CommTopology& topo,
                           const AlgorithmCollection& algorithms) const {
  return SelectionPlan(*this, algorithms, forcedAlgorithmsFromEnv()).select(args, topo);
}

}  // namespace meshcomm
