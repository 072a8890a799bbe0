// Selection-table errors: "selection table: rule 3: field 'dtype': ...", bounded in length because the
// message quotes input (file content, environment values).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "base/bounded_text.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

// Throws Error(InvalidUsage): "selection table: <args...>", cut at kMaxErrorMessage bytes.
template <typename... Args>
[[noreturn]] void failTable(Args&&... args) {
  throw Error(
      ErrorCode::InvalidUsage,
      boundedText(detail::concat("selection table: ", std::forward<Args>(args)...), kMaxErrorMessage));
}

// A name from the table in quotes, long ones cut: 'allreduce_rsag'.
inline std::string quotedName(std::string_view name) {
  return "'" + boundedText(name) + "'";
}

// Throws Error(InvalidUsage): "selection table: rule <index>: field '<field>': <args...>".
template <typename... Args>
[[noreturn]] void failRuleField(size_t index, std::string_view field, Args&&... args) {
  failTable("rule ", index, ": field ", quotedName(field), ": ", std::forward<Args>(args)...);
}

}  // namespace meshcomm
