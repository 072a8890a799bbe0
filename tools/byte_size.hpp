// Command-line byte sizes of the tools: "1024", "64K", "16M", "1G", "1.5MB" (K/M/G are powers of 1024).
#pragma once

#include <cstdint>
#include <string>

namespace meshcomm::tools {

// Throws Error(InvalidUsage) naming `tool` and the text when it is not a positive size.
uint64_t parseByteSize(const char* tool, const std::string& text);

}  // namespace meshcomm::tools
