// Environment variables refused or bounded where a value would otherwise be ignored or wait forever:
// MESHCOMM_LOG_LEVEL must name a level; Connection::flush() without a timeout waits MESHCOMM_FLUSH_TIMEOUT
// seconds, a positive number.
#include <gtest/gtest.h>

#include <string>

#include "base/logging.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "error_text.hpp"
#include "scoped_env.hpp"
#include "transport/transport_common.hpp"

namespace meshcomm {
namespace {

using test::ScopedEnv;

TEST(EnvChecks, AnUnknownLogLevelIsRefusedNamingTheValue) {
  {
    ScopedEnv level("MESHCOMM_LOG_LEVEL", "verbose");
    EXPECT_NE(test::errorText(requireValidLogLevel)
                  .find("MESHCOMM_LOG_LEVEL='verbose' is not one of ERROR, WARN, INFO, "
                        "DEBUG"),
              std::string::npos);
  }
  for (const char* ok : {"ERROR", "WARN", "INFO", "DEBUG"}) {
    ScopedEnv level("MESHCOMM_LOG_LEVEL", ok);
    EXPECT_NO_THROW(requireValidLogLevel()) << ok;
  }
  ScopedEnv unset("MESHCOMM_LOG_LEVEL", nullptr);
  EXPECT_NO_THROW(requireValidLogLevel());
}

TEST(EnvChecks, ErrorsQuoteAnEnvironmentValueByAPrefix) {
  const std::string huge(1 << 20, 'x');
  {
    ScopedEnv level("MESHCOMM_LOG_LEVEL", huge.c_str());
    const std::string text = test::errorText(requireValidLogLevel);
    EXPECT_NE(text.find("MESHCOMM_LOG_LEVEL='xxx"), std::string::npos) << text.substr(0, 200);
    EXPECT_LT(text.size(), 1024u);
  }
  {
    ScopedEnv timeout("MESHCOMM_FLUSH_TIMEOUT", huge.c_str());
    const std::string text = test::errorText([] { envInt("MESHCOMM_FLUSH_TIMEOUT"); });
    EXPECT_NE(text.find("is not an integer"), std::string::npos) << text.substr(0, 200);
    EXPECT_LT(text.size(), 1024u);
  }
}

TEST(EnvChecks, FlushWaitsAPositiveDeadlineByDefault) {
  {
    ScopedEnv unset("MESHCOMM_FLUSH_TIMEOUT", nullptr);
    EXPECT_EQ(internal::flushTimeoutSec(-1), 120.0);
    EXPECT_EQ(internal::flushTimeoutSec(2.5), 2.5);  // an explicit timeout wins
  }
  {
    ScopedEnv set("MESHCOMM_FLUSH_TIMEOUT", "7");
    EXPECT_EQ(internal::flushTimeoutSec(-1), 7.0);
  }
  for (const char* bad : {"0", "-1"}) {
    ScopedEnv set("MESHCOMM_FLUSH_TIMEOUT", bad);
    try {
      internal::flushTimeoutSec(-1);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find(std::string("MESHCOMM_FLUSH_TIMEOUT=") + bad + " must be a positive"),
          std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace meshcomm
