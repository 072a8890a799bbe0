// Files of the source tree the CPU tests read: a file's contents, and the seeds of a fuzz corpus by name
// prefix.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace meshcomm::test {

inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The files of `dir` whose names start with `prefix` (e.g. "valid_").
inline std::vector<std::filesystem::path> filesStartingWith(const std::filesystem::path& dir,
                                                            const std::string& prefix) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) files.push_back(entry.path());
  return files;
}

}  // namespace meshcomm::test
