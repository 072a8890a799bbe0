#include "logging.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <optional>

#include "base/bounded_text.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {
// MESHCOMM_LOG_LEVEL, or nothing for a value that names no level.
std::optional<LogLevel> levelFromEnv() {
  const std::string s = envString("MESHCOMM_LOG_LEVEL");
  if (s == "ERROR") return LogLevel::ERROR;
  if (s == "WARN") return LogLevel::WARN;
  if (s == "INFO") return LogLevel::INFO;
  if (s == "DEBUG") return LogLevel::DEBUG;
  return std::nullopt;
}

// Logging itself never throws: an invalid value logs at WARN here and is refused by requireValidLogLevel(),
// which every Communicator runs when it is built.
LogLevel configuredLevel() {
  static const LogLevel level = levelFromEnv().value_or(LogLevel::WARN);
  return level;
}
const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::ERROR:
      return "ERROR";
    case LogLevel::WARN:
      return "WARN";
    case LogLevel::INFO:
      return "INFO";
    case LogLevel::DEBUG:
      return "DEBUG";
  }
  return "?";
}
}  // namespace

void requireValidLogLevel() {
  if (!levelFromEnv()) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "environment variable MESHCOMM_LOG_LEVEL='",
                   boundedText(envString("MESHCOMM_LOG_LEVEL")), "' is not one of ERROR, WARN, INFO, DEBUG");
  }
}

bool logEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(configuredLevel());
}

void logLine(LogLevel level, const std::string& text) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "meshcomm %s [pid %d] %s\n", levelName(level), static_cast<int>(getpid()),
               text.c_str());
}

}  // namespace meshcomm
