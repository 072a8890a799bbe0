// Plan errors: every message names the plan and the JSON path of the value at fault.
#pragma once

#include <string>
#include <utility>

#include "meshcomm/errors.hpp"

namespace meshcomm::plan::detail {

// `plan "name": ` once the name is known, else `plan: `.
inline std::string planPrefix(const std::string& planName) {
  return planName.empty() ? std::string("plan: ") : "plan \"" + planName + "\": ";
}

// Throws meshcomm::Error(InvalidUsage): `plan "name": path: <args...>` (an empty path: the whole document).
template <typename... Args>
[[noreturn]] void failAt(const std::string& planName, const std::string& path, Args&&... args) {
  MESHCOMM_THROW(ErrorCode::InvalidUsage, planPrefix(planName), path, path.empty() ? "" : ": ",
                 std::forward<Args>(args)...);
}

// Joins a JSON path and a member key: "ranks[0]" + "channels" -> "ranks[0].channels".
inline std::string memberPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Joins a JSON path and an array position: "ranks" + 2 -> "ranks[2]".
inline std::string elementPath(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

}  // namespace meshcomm::plan::detail
