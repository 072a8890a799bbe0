// The message of an Error without its "code: " prefix, to re-throw it with more context.
#pragma once

#include <string>

#include "meshcomm/errors.hpp"

namespace meshcomm {

inline std::string messageOf(const Error& e) {
  const std::string prefix = std::string(errorCodeName(e.code())) + ": ";
  const std::string what = e.what();
  return what.compare(0, prefix.size(), prefix) == 0 ? what.substr(prefix.size()) : what;
}

}  // namespace meshcomm
