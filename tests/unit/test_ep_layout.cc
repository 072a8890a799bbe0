// The layouts of meshcomm.ep's regions (src/ep/ep_region.hpp): the device region's areas and the network
// region's (across nodes) follow each other inside the region without overlap, start 256-byte aligned, and
// the row layouts keep every field inside a 16-byte aligned stride.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "ep/ep_region.hpp"

namespace meshcomm::ep {
namespace {

using Area = std::pair<uint64_t, uint64_t>;  // [begin, end)

// The areas, in address order, must be aligned, ordered and disjoint, and the last must end inside `bytes`.
void expectTiled(const std::vector<Area>& areas, uint64_t header, uint64_t bytes, const char* what) {
  uint64_t end = header;
  for (size_t i = 0; i < areas.size(); ++i) {
    EXPECT_EQ(areas[i].first % 256, 0u) << what << " area " << i;
    EXPECT_GE(areas[i].first, end) << what << " area " << i << " overlaps the one before";
    EXPECT_LE(areas[i].first, areas[i].second) << what << " area " << i;
    end = areas[i].second;
  }
  EXPECT_LE(end, bytes) << what;
}

const uint64_t kSizes[] = {1ull << 20, (1ull << 20) + 256 * 7, 256ull << 20, 1ull << 30, 3ull << 30};

TEST(EpLayout, DeviceRegionAreasTileTheRegion) {
  for (uint64_t bytes : kSizes) {
    const RegionLayout l = RegionLayout::of(bytes);
    EXPECT_GE(l.ready, l.records + sizeof(LL16Packet) * kMaxRanks * kMaxSendBlocks * kDispatchRounds);
    EXPECT_GE(l.counts, l.ready + sizeof(LL16Packet) * kMaxRanks);
    EXPECT_GE(l.headerBytes(), l.counts + kCountPacketBytes * kMaxRanks);
    expectTiled({{l.rows, l.rows + l.rowsBytes}, {l.slabs, l.slabs + l.slabsBytes}}, l.headerBytes(), bytes,
                "device region");
    EXPECT_EQ(l.slabs + l.slabsBytes, bytes) << "the slabs take the rest";
    EXPECT_GT(l.rowsBytes, 0u);
  }
}

TEST(EpLayout, NetworkRegionAreasTileTheRegion) {
  for (uint64_t bytes : kSizes) {
    const NetworkLayout l = NetworkLayout::of(bytes);
    EXPECT_EQ(l.countsIn, 0u);
    EXPECT_GE(l.countsOut, l.countsIn + kCountRecordBytes * kMaxRanks);
    EXPECT_GE(l.headerBytes(), l.countsOut + kCountRecordBytes * kMaxRanks);
    expectTiled({{l.dispatchStaging, l.dispatchStaging + l.stagingBytes},
                 {l.combineStaging, l.combineStaging + l.stagingBytes},
                 {l.rows, l.rows + l.rowsBytes},
                 {l.slabs, l.slabs + l.slabsBytes}},
                l.headerBytes(), bytes, "network region");
    EXPECT_GT(l.stagingBytes, 0u);
    EXPECT_GT(l.rowsBytes, 0u);
    EXPECT_GT(l.slabsBytes, 0u);
  }
  // A region no larger than its header has empty areas, never areas past its end.
  const NetworkLayout tiny = NetworkLayout::of(NetworkLayout::of(0).headerBytes());
  EXPECT_EQ(tiny.stagingBytes + tiny.rowsBytes + tiny.slabsBytes, 0u);
}

TEST(EpLayout, CountRowsFitTheirRecordsAndPackets) {
  EXPECT_GE(kCountRecordBytes, 4ull * kCountWords);
  EXPECT_EQ(kCountRecordBytes % 16, 0u);
  // Two words per LL packet; an odd last word shares its packet with a zero.
  EXPECT_GE(kCountPacketBytes / sizeof(LL16Packet) * 2, static_cast<uint64_t>(kCountWords));
}

TEST(EpLayout, RowFieldsStayInsideTheirStride) {
  for (int hidden : {16, 7168, 7168 * 2}) {
    for (int topk : {0, 1, 8, 32}) {
      for (int scales : {0, 56}) {
        const Shape s{hidden, scales, topk, 256};
        const RowLayout r = RowLayout::of(s);
        EXPECT_EQ(r.stride % 16, 0u);
        EXPECT_EQ(r.topkIdx % 8, 0u) << "i64 top-k indices";
        EXPECT_GE(r.weights, r.topkIdx + 8ull * topk);
        EXPECT_GE(r.scales, r.weights + 4ull * topk);
        EXPECT_GE(r.srcIdx, r.scales + 4ull * scales);
        EXPECT_LE(r.srcIdx + 4, r.stride);
        const SlabLayout l = SlabLayout::of(s);
        EXPECT_EQ(l.stride % 16, 0u);
        EXPECT_EQ(l.flag % 8, 0u) << "the u64 flag";
        EXPECT_GE(l.flag, l.weights + 4ull * topk);
        EXPECT_LE(l.flag + 8, l.stride);
      }
    }
  }
}

}  // namespace
}  // namespace meshcomm::ep
