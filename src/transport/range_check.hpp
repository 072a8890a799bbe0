// Overflow-safe range checks shared by the connections, the TCP receiver and the proxy's trigger checks.
#pragma once

#include <cstdint>

namespace meshcomm::internal {

// True when [offset, offset+bytes) lies inside [0, size), without computing offset+bytes (no wrap-around).
inline bool rangeWithin(uint64_t offset, uint64_t bytes, uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

}  // namespace meshcomm::internal
