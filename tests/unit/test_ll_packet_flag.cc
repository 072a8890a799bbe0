// The LL packet flag of every protocol (meshcomm/device/packet.hpp): never a value that fresh (zeroed) or
// 0xff-filled memory holds, and different for consecutive epochs and for epochs two apart (the reuses of a
// packet buffer and of one of its halves), also across the modulus' wrap.
#include <gtest/gtest.h>

#include <cstdint>

#include "meshcomm/device/packet.hpp"

namespace meshcomm {
namespace {

TEST(LLPacketFlag, NeverZeroNorAllOnes) {
  constexpr unsigned long long kModulus = 0xFFFFFFFEull;
  for (unsigned long long base : {0ull, kModulus - 3, 2 * kModulus - 3, ~0ull - 8}) {
    for (unsigned long long e = base; e < base + 8; ++e) {
      EXPECT_NE(llPacketFlag(e), 0u) << "epoch " << e;
      EXPECT_NE(llPacketFlag(e), 0xFFFFFFFFu) << "epoch " << e;
    }
  }
}

TEST(LLPacketFlag, DiffersOneAndTwoEpochsApartAcrossTheWrap) {
  constexpr unsigned long long kModulus = 0xFFFFFFFEull;
  for (unsigned long long base : {0ull, 1ull, kModulus - 3, kModulus * 5 - 2, ~0ull - 8}) {
    for (unsigned long long e = base; e < base + 6; ++e) {
      EXPECT_NE(llPacketFlag(e), llPacketFlag(e + 1)) << "epoch " << e;
      EXPECT_NE(llPacketFlag(e), llPacketFlag(e + 2)) << "epoch " << e;
    }
  }
}

}  // namespace
}  // namespace meshcomm
