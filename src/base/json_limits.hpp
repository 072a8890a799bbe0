// JSON input with limits: documents are parsed with a nesting limit (enforced while parsing, so neither the
// parser nor the destructor of the result recurses deeply), and values are described in messages by a
// bounded text, never by dumping them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace meshcomm {

// Deepest nesting a document may have; deeper text is rejected while parsing.
constexpr int kMaxJsonDepth = 32;

// Parses JSON text. Too deep nesting and syntax errors throw Error(InvalidUsage) whose message is `context`
// followed by "JSON nested deeper than 32 levels" or "not valid JSON: " and the parser's (bounded) message.
nlohmann::json parseJsonLimited(std::string_view text, const std::string& context);

// A short description of a value for messages: numbers, booleans and null as written, strings quoted (long
// ones cut), arrays and objects by kind.
std::string describeJson(const nlohmann::json& value);

// `s` as a quoted JSON string (control characters escaped), long ones cut with an ellipsis.
std::string describeJsonString(std::string_view s);

}  // namespace meshcomm
