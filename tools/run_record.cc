// runRecord (run_record.hpp): the run's facts for the tools' JSON output.
#include "run_record.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace meshcomm::tools {

namespace {

// The first line a shell command prints, or "" when it fails.
std::string firstLineOf(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof(buf), p)) out = buf;
    if (::pclose(p) != 0) out.clear();
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string sourceCommit() {
  // A copy of the tree whose git metadata is not the measured commit's names it (as bench/torch's scripts).
  if (const char* given = std::getenv("MESHCOMM_BENCH_COMMIT"); given != nullptr && *given != '\0')
    return given;
  const std::string git = std::string("git -C '") + MESHCOMM_SOURCE_DIR + "' ";
  const std::string head = firstLineOf(git + "rev-parse --short HEAD 2>/dev/null");
  if (head.empty()) return "unknown";
  const std::string dirty = firstLineOf(git + "status --porcelain --untracked-files=no 2>/dev/null");
  return dirty.empty() ? head : head + "+changes";
}

std::string todayUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

std::string commandLine(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + std::string(argv[i]);
  return line;
}

nlohmann::json runRecord(const std::string& tool, const std::string& device, int ranks,
                         const std::string& command) {
  return {{"tool", tool},   {"date", todayUtc()},       {"device", device},
          {"ranks", ranks}, {"commit", sourceCommit()}, {"command", command}};
}

nlohmann::json numberOrNull(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

}  // namespace meshcomm::tools
