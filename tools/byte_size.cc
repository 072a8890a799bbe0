#include "byte_size.hpp"

#include <cctype>
#include <cstdlib>

#include "meshcomm/errors.hpp"

namespace meshcomm::tools {

uint64_t parseByteSize(const char* tool, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  uint64_t unit = 1;
  if (end != nullptr && *end != '\0') {
    switch (std::toupper(static_cast<unsigned char>(*end))) {
      case 'K':
        unit = 1ull << 10;
        break;
      case 'M':
        unit = 1ull << 20;
        break;
      case 'G':
        unit = 1ull << 30;
        break;
      default:
        unit = 0;
    }
    const bool suffixOk =
        end[1] == '\0' || (std::toupper(static_cast<unsigned char>(end[1])) == 'B' && end[2] == '\0');
    if (unit == 0 || !suffixOk)
      MESHCOMM_THROW(ErrorCode::InvalidUsage, tool, ": cannot parse size '", text, "'");
  }
  if (!(value > 0)) MESHCOMM_THROW(ErrorCode::InvalidUsage, tool, ": size '", text, "' must be positive");
  return static_cast<uint64_t>(value * static_cast<double>(unit));
}

}  // namespace meshcomm::tools
