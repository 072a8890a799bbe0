// libFuzzer target for the memory descriptor a peer sends with a registration
// (src/core/memory_descriptor.cc): fromBytes and fromPeer on the input. meshcomm::Error is the expected way
// to reject an input; a descriptor that is accepted must serialize back to the same bytes. Anything else
// (another exception, a crash, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/registered_memory_impl.hpp"
#include "meshcomm/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using meshcomm::MemoryDescriptor;
  try {
    const MemoryDescriptor d = MemoryDescriptor::fromBytes(data, size, "fuzz");
    const std::vector<char> back = d.toBytes();
    if (back.size() != size || std::memcmp(back.data(), data, size) != 0) abort();
    MemoryDescriptor::fromPeer(std::vector<char>(data, data + size), d.ownerRank, "fuzz");
  } catch (const meshcomm::Error&) {
  }
  return 0;
}
