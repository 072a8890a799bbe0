#include "logging.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "meshcomm/env.hpp"

namespace meshcomm {

namespace {
LogLevel configuredLevel() {
  static const LogLevel level = [] {
    std::string s = envString("MESHCOMM_LOG_LEVEL");
    if (s == "ERROR") return LogLevel::ERROR;
    if (s == "INFO") return LogLevel::INFO;
    if (s == "DEBUG") return LogLevel::DEBUG;
    return LogLevel::WARN;
  }();
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
