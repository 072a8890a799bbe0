// libFuzzer target for the plan loader: every input goes through parsePlan and planHash. meshcomm::Error is
// the expected way to reject an input; any other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "meshcomm/errors.hpp"
#include "meshcomm/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    meshcomm::plan::parsePlan(text);
  } catch (const meshcomm::Error&) {
  }
  try {
    meshcomm::plan::planHash(text);
  } catch (const meshcomm::Error&) {
  }
  return 0;
}
