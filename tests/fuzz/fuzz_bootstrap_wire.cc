// libFuzzer target for the bootstrap's decoders of bytes a peer controls (src/bootstrap/wire.hpp,
// handshake.hpp, unique_id.hpp). The first input byte picks the message, the rest are its bytes: 0 hello,
// 1 frame header, 2 reply header + rank table, 3 handshake proof, 4 UniqueId, 5 secret in hex.
// meshcomm::Error is the expected way to reject an input; any other exception, a crash or a sanitizer report
// is a finding, and so is a proof of random bytes that verifies.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/handshake.hpp"
#include "bootstrap/unique_id.hpp"
#include "bootstrap/wire.hpp"
#include "meshcomm/errors.hpp"

namespace {

using namespace meshcomm;
using namespace meshcomm::bootstrap;

const Secret kSecret = {7, 1, 4, 9, 2, 8, 3, 6, 5, 0, 11, 13, 12, 15, 14, 10};
constexpr uint64_t kNonce = 0x0123456789abcdefull;

void decode(uint8_t which, const std::vector<uint8_t>& bytes) {
  switch (which % 6) {
    case 0:
      decodeHello(bytes, "fuzz");
      break;
    case 1:
      decodeFrameHeader(bytes, "fuzz");
      break;
    case 2: {
      if (bytes.size() < kReplyHeaderBytes) return;
      const ReplyHeader h = decodeReplyHeader(bytes.data(), kReplyHeaderBytes, "fuzz");
      decodeRankTable(std::vector<uint8_t>(bytes.begin() + kReplyHeaderBytes, bytes.end()), h.count, "fuzz");
      break;
    }
    case 3: {
      // libFuzzer's comparison tracing can learn the expected MAC (an attacker cannot), so a proof may
      // verify; then the rank it reports must be the one the bytes carry (offset 8).
      const auto proof = verifyProof(bytes, kSecret, kNonce, 0);
      if (proof) {
        WireReader r(bytes);
        r.u64();
        if (proof->connectorRank != r.i32()) abort();
      }
      break;
    }
    case 4: {
      UniqueId id;
      if (!bytes.empty()) std::memcpy(id.bytes.data(), bytes.data(), std::min(bytes.size(), id.bytes.size()));
      decodeUniqueId(id, "fuzz");
      break;
    }
    case 5:
      parseSecretHex(std::string(bytes.begin(), bytes.end()), "FUZZ_SECRET");
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    decode(data[0], std::vector<uint8_t>(data + 1, data + size));
  } catch (const meshcomm::Error&) {
  }
  return 0;
}
