// libFuzzer target for the TCP transport's wire format (src/transport/tcp_wire.hpp): the input's bytes as a
// data header, a listener endpoint and a connection's auth message. A decode that succeeds must survive
// encode -> decode unchanged; a mismatch, a crash or a sanitizer report is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "transport/tcp_wire.hpp"

namespace {

using namespace meshcomm::tcpwire;

template <size_t N>
std::array<uint8_t, N> take(const uint8_t* data, size_t size) {
  std::array<uint8_t, N> b{};
  std::copy(data, data + std::min(size, N), b.begin());
  return b;
}

void checkHeader(const uint8_t* data, size_t size) {
  Header h;
  std::string why;
  if (!decodeHeader(take<kHeaderBytes>(data, size), &h, &why)) {
    if (why.empty()) abort();  // a refusal always says why
    return;
  }
  Header again;
  if (!decodeHeader(encodeHeader(h), &again, &why) || again.op != h.op || again.memoryId != h.memoryId ||
      again.offset != h.offset || again.value != h.value)
    abort();
}

void checkEndpoint(const uint8_t* data, size_t size) {
  Endpoint e, again;
  if (!decodeEndpoint(take<kEndpointBytes>(data, size), &e)) return;
  if (!decodeEndpoint(encodeEndpoint(e), &again) || again.family != e.family || again.port != e.port ||
      again.address != e.address || again.cookie != e.cookie)
    abort();
}

void checkAuth(const uint8_t* data, size_t size) {
  Auth a, again;
  if (!decodeAuth(take<kAuthBytes>(data, size), &a)) return;
  if (!decodeAuth(encodeAuth(a), &again) || again.rank != a.rank || again.cookie != a.cookie) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  checkHeader(data, size);
  checkEndpoint(data, size);
  checkAuth(data, size);
  return 0;
}
