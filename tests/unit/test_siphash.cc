#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "base/siphash.hpp"

namespace meshcomm {
namespace {

SipKey referenceKey() {
  SipKey key;
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  return key;
}

// The reference implementation's vectors_sip64 (key 00..0f, message 00..len-1); len 15 is the worked example
// of the SipHash paper's Appendix A. Lengths 0-16 cover every tail length and a second full block.
TEST(SipHash, ReferenceVectors) {
  const uint64_t expected[] = {
      0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d, 0xcf2794e0277187b7,
      0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137, 0x93f5f5799a932462, 0x9e0082df0ba9e4b0,
      0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7, 0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee,
      0xa129ca6149be45e5, 0x3f2acc7f57c29bdb,
  };
  std::vector<uint8_t> message;
  for (size_t len = 0; len < std::size(expected); ++len) {
    EXPECT_EQ(sipHash24(referenceKey(), message.data(), message.size()), expected[len]) << "length " << len;
    message.push_back(static_cast<uint8_t>(len));
  }
}

TEST(SipHash, KeyAndMessageBothMatter) {
  const char msg[] = "meshcomm";
  SipKey other = referenceKey();
  other[15] ^= 1;
  uint64_t base = sipHash24(referenceKey(), msg, 8);
  EXPECT_NE(base, sipHash24(other, msg, 8));
  EXPECT_NE(base, sipHash24(referenceKey(), msg, 7));
  EXPECT_EQ(base, sipHash24(referenceKey(), msg, 8));
}

}  // namespace
}  // namespace meshcomm
