// JSON input with limits: the depth-limited parse and bounded descriptions of values.
#include "base/json_limits.hpp"

#include "base/bounded_text.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxDescribedString = 40;

}  // namespace

json parseJsonLimited(std::string_view text, const std::string& context) {
  const auto limitDepth = [&context](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth)
      MESHCOMM_THROW(ErrorCode::InvalidUsage, context, "JSON nested deeper than ", kMaxJsonDepth, " levels");
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limitDepth);
  } catch (const json::exception& e) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, context, "not valid JSON: ", boundedText(e.what(), 256));
  }
}

std::string describeJsonString(std::string_view s) {
  const bool cut = s.size() > kMaxDescribedString;
  const json quoted = std::string(cut ? s.substr(0, kMaxDescribedString) : s);
  return quoted.dump(-1, ' ', false, json::error_handler_t::replace) + (cut ? "..." : "");
}

std::string describeJson(const json& value) {
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  if (value.is_string()) return describeJsonString(value.get_ref<const std::string&>());
  return value.dump();
}

}  // namespace meshcomm
