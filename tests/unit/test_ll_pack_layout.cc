// Layout of LL16 packs in the reduction algorithms' packet slots (reduction_common.hpp): every packet index
// of a slot holding `packs` packs is used exactly once, and a warp's 32 consecutive packs (aligned group)
// write each half as one contiguous run of 32 packets.
#include <gtest/gtest.h>

#include <vector>

#include "collectives/algorithms/reduction_common.hpp"

namespace meshcomm::reduction {
namespace {

TEST(LLPackLayout, EveryPacketOfTheRegionIsUsedOnce) {
  for (uint64_t packs : {1ull, 31ull, 32ull, 33ull, 4096ull, 4097ull}) {
    const uint64_t slotPackets = packRegionBytes(packs) / 16;
    ASSERT_EQ(slotPackets % (2 * kPackGroup), 0u) << "packs " << packs;
    ASSERT_GE(slotPackets, 2 * packs);
    ASSERT_LT(slotPackets, 2 * packs + 2 * kPackGroup);
    // The region's packs are the whole groups covering `packs`: the map is a bijection onto the region.
    const uint64_t regionPacks = slotPackets / 2;
    std::vector<int> uses(slotPackets, 0);
    for (uint64_t j = 0; j < regionPacks; ++j) {
      for (uint32_t h = 0; h < 2; ++h) {
        const uint64_t k = packPacketIndex(j, h);
        ASSERT_LT(k, slotPackets) << "pack " << j << " half " << h;
        ++uses[k];
      }
    }
    for (uint64_t k = 0; k < slotPackets; ++k) EXPECT_EQ(uses[k], 1) << "packet " << k << " packs " << packs;
  }
}

TEST(LLPackLayout, AWarpsHalvesAreContiguousRuns) {
  for (uint64_t group : {0ull, 1ull, 7ull}) {
    for (uint32_t h = 0; h < 2; ++h) {
      const uint64_t first = packPacketIndex(group * kPackGroup, h);
      EXPECT_EQ(first, group * 2 * kPackGroup + h * kPackGroup);
      for (uint64_t lane = 1; lane < kPackGroup; ++lane)
        EXPECT_EQ(packPacketIndex(group * kPackGroup + lane, h), first + lane) << "lane " << lane;
    }
  }
}

}  // namespace
}  // namespace meshcomm::reduction
