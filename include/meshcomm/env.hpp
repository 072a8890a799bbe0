// The registry of every MESHCOMM_* environment variable: each is declared once (name, type, default, doc)
// in src/base/env.cc and listed in docs/env.md (a unit test keeps the two in step).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshcomm {

enum class EnvType { Int, Bool, String };

struct EnvVarInfo {
  const char* name;
  EnvType type;
  const char* defaultValue;  // as text; "" means unset/none
  const char* doc;
};

// All declared variables, in declaration order.
const std::vector<EnvVarInfo>& envRegistry();

// Typed accessors. Each throws Error(InvalidUsage) naming the variable if `name` is not declared in the
// registry or its value does not parse as the declared type. Values are read from the environment on
// every call (cheap; callers on hot paths cache them).
int64_t envInt(const char* name);
bool envBool(const char* name);
std::string envString(const char* name);
// The raw value if set and non-empty, else nullopt (the variable must be declared).
std::optional<std::string> envRaw(const char* name);

}  // namespace meshcomm
