#include "bootstrap/limits.hpp"

#include <algorithm>

#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::bootstrap {

double handshakeTimeout(double bootstrapTimeoutSec) {
  return std::min(kHandshakeTimeoutSec, bootstrapTimeoutSec);
}

uint64_t maxMessageFromEnv(const std::string& who) {
  int64_t limit = envInt("MESHCOMM_BOOTSTRAP_MAX_MESSAGE");  // names the variable when not an integer
  MESHCOMM_REQUIRE(limit > 0, who, ": MESHCOMM_BOOTSTRAP_MAX_MESSAGE=", limit,
                   " must be a positive number of bytes");
  return static_cast<uint64_t>(limit);
}

double timeoutFromEnv(const std::string& who) {
  const int64_t seconds = envInt("MESHCOMM_BOOTSTRAP_TIMEOUT");
  MESHCOMM_REQUIRE(seconds > 0, who, ": MESHCOMM_BOOTSTRAP_TIMEOUT=", seconds,
                   " must be a positive number of seconds");
  return static_cast<double>(seconds);
}

}  // namespace meshcomm::bootstrap
