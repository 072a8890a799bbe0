// Bounded text for error messages built from input (file content, environment values): a value is quoted
// by a prefix with an ellipsis, and a whole message is cut at kMaxErrorMessage bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace meshcomm {

// Longest input value an error message quotes whole.
constexpr size_t kMaxQuotedText = 64;
// Longest error message built from input.
constexpr size_t kMaxErrorMessage = 4096;

// `text` when it has at most `maxBytes` bytes, else its first bytes (cut at a UTF-8 character boundary)
// followed by "... (N bytes)"; the result has at most maxBytes + 32 bytes.
std::string boundedText(std::string_view text, size_t maxBytes = kMaxQuotedText);

// A file path (or a directory from the environment) in quotes, cut only when longer than any real path.
inline std::string quotedPath(std::string_view path) {
  return "'" + boundedText(path, 1024) + "'";
}

}  // namespace meshcomm
