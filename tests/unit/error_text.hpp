// errorText: the message of the meshcomm::Error a call throws, checking its code (a test failure when the
// call throws nothing or another code).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "meshcomm/errors.hpp"

namespace meshcomm::test {

inline std::string errorText(const std::function<void()>& call,
                             ErrorCode expected = ErrorCode::InvalidUsage) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

}  // namespace meshcomm::test
