// Reading a configuration file (a plan, a selection table) whole, with a bound on its size: a file given by a
// path or environment variable cannot make a rank allocate more than the bound.
#pragma once

#include <cstdint>
#include <string>

namespace meshcomm {

// Files of JSON configuration larger than this are refused before they are read.
constexpr uint64_t kMaxConfigFileBytes = 64ull << 20;

// The contents of `path`. Throws Error(SystemError) "<what> '<path>': cannot open|read" (with errno), or
// Error(InvalidUsage) "<what> '<path>': N bytes, more than the limit of M" for a larger file; a long path is
// cut in the message.
std::string readBoundedFile(const std::string& path, const std::string& what,
                            uint64_t maxBytes = kMaxConfigFileBytes);

}  // namespace meshcomm
