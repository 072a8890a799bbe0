// Internal host logging: MESHCOMM_LOG(WARN, "text ", value) writes one line to stderr when the level
// set by MESHCOMM_LOG_LEVEL allows it.
#pragma once

#include "meshcomm/errors.hpp"

namespace meshcomm {

enum class LogLevel { ERROR = 0, WARN = 1, INFO = 2, DEBUG = 3 };

bool logEnabled(LogLevel level);
// Throws Error(InvalidUsage) when MESHCOMM_LOG_LEVEL names no level (every Communicator checks it when
// built).
void requireValidLogLevel();
void logLine(LogLevel level, const std::string& text);

}  // namespace meshcomm

#define MESHCOMM_LOG(level, ...)                                                                 \
  do {                                                                                           \
    if (::meshcomm::logEnabled(::meshcomm::LogLevel::level))                                     \
      ::meshcomm::logLine(::meshcomm::LogLevel::level, ::meshcomm::detail::concat(__VA_ARGS__)); \
  } while (0)
