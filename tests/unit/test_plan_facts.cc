// analyzePlan on the DSL's golden plans (tests/python/dsl/golden) and on hand-made plans: what each needs
// from a communicator and why a plan cannot run, computed from every rank's part alike.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "meshcomm/plan.hpp"
#include "plan/plan_facts.hpp"
#include "test_files.hpp"

namespace meshcomm::plan {
namespace {

Plan golden(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(MESHCOMM_SOURCE_DIR) / "tests/python/dsl/golden";
  return parsePlan(test::readFile(dir / (name + ".r4.json")));
}

TEST(PlanFacts, TheShippedPlansRunOnAFourRankCommunicator) {
  for (const char* name :
       {"allreduce_allpairs_ll", "allreduce_twoshot", "allreduce_ring", "allgather_fullmesh",
        "reduce_scatter_fullmesh", "alltoall_fullmesh", "allreduce_hierarchical"}) {
    const PlanFacts f = analyzePlan(golden(name), 8, 132, 512);
    EXPECT_EQ(f.reason, "") << name;
    EXPECT_GE(f.maxBlocks, 1) << name;
  }
}

TEST(PlanFacts, WhatEachPlanReaches) {
  const PlanFacts ll = analyzePlan(golden("allreduce_allpairs_ll"), 8, 132, 512);
  EXPECT_FALSE(ll.reachesPeerBuffers);
  EXPECT_FALSE(ll.writesPeerScratch);
  EXPECT_TRUE(ll.reduces);
  EXPECT_EQ(ll.maxScratchChunks, 4u);
  // 256 KiB max per rank, one chunk per unit: (256 KiB + 16) data bytes, 32 packet bytes per 16.
  EXPECT_GE(ll.packetChunkBytes, 2u * (1u << 18));
  EXPECT_EQ(ll.packetRegionBytes, 2 * 4 * ll.packetChunkBytes);
  const PlanFacts twoshot = analyzePlan(golden("allreduce_twoshot"), 8, 132, 512);
  EXPECT_TRUE(twoshot.reachesPeerBuffers);  // phase 2 puts into the peers' outputs
  EXPECT_TRUE(twoshot.writesPeerScratch);   // phase 1 puts into the peers' scratch
  const PlanFacts allgather = analyzePlan(golden("allgather_fullmesh"), 8, 132, 512);
  EXPECT_TRUE(allgather.reachesPeerBuffers);
  EXPECT_FALSE(allgather.writesPeerScratch);
  EXPECT_FALSE(allgather.reduces);
}

TEST(PlanFacts, ACommunicatorWithoutTheResourcesIsNamed) {
  const Plan ring = golden("allreduce_ring");
  EXPECT_NE(analyzePlan(ring, 0, 132, 512).reason.find("has 0 per peer (MESHCOMM_CHANNELS_PER_PEER)"),
            std::string::npos);
  Plan wide = ring;
  wide.numThreadsPerBlock = 1024;
  EXPECT_NE(analyzePlan(wide, 8, 132, 512).reason.find("num_threads_per_block 1024 exceeds"),
            std::string::npos);
  EXPECT_EQ(analyzePlan(ring, 8, 0, 512).reason, "");  // an unknown SM count sets no limit
  Plan many = ring;
  many.ranks[2].threadblocks.resize(200, many.ranks[2].threadblocks[0]);
  EXPECT_NE(analyzePlan(many, 8, 132, 512).reason.find("200 thread blocks, more than the GPU's 132"),
            std::string::npos);
}

TEST(PlanFacts, AnLLPlanWithoutABoundedSizeIsRefused) {
  Plan ll = golden("allreduce_allpairs_ll");
  ll.maxMessageSize = 1ull << 62;
  EXPECT_NE(analyzePlan(ll, 8, 132, 512).reason.find("overflows"), std::string::npos);
}

TEST(PlanFacts, SimpleChunksStartOnWholeLinesAndLLChunksStayExact) {
  Plan simple = golden("reduce_scatter_fullmesh");
  simple.chunksPerUnit = 12;
  EXPECT_EQ(chunkElems(simple, 1003, 4), 96u);     // ceil(1003 / 12) = 84 floats, rounded to 32-float lines
  EXPECT_EQ(chunkElems(simple, 1003, 8), 96u);     // 16-double lines
  EXPECT_EQ(chunkElems(simple, 1003, 2), 128u);    // 64-half lines
  EXPECT_EQ(chunkElems(simple, 12 * 64, 4), 64u);  // already whole lines: unchanged
  EXPECT_EQ(chunkElems(simple, 1, 4), 32u);
  EXPECT_EQ(chunkElems(simple, 0, 4), 0u);
  for (uint64_t elem : {1u, 2u, 4u, 8u})
    EXPECT_EQ(chunkElems(simple, 4194304 + 7, elem) * elem % kChunkLineBytes, 0u) << elem;
  Plan ll = golden("allreduce_allpairs_ll");
  ll.chunksPerUnit = 12;
  EXPECT_EQ(chunkElems(ll, 1003, 4), 84u);
}

TEST(PlanFacts, ChunkCountsMustBeTheCollectives) {
  Plan p = golden("allgather_fullmesh");
  p.outputChunks = p.inputChunks;  // an allgather's output holds every rank's unit
  EXPECT_NE(analyzePlan(p, 8, 132, 512).reason.find("not the collective's units x chunks_per_unit"),
            std::string::npos);
}

TEST(PlanFacts, AChannelWaitedOnByTwoBlocksIsRefused) {
  Plan p = golden("alltoall_fullmesh");
  // Rank 0's block 1 waits on the channel block 0 waits on.
  Op wait;
  wait.kind = OpKind::Wait;
  wait.channel = p.ranks[0].threadblocks[0].ops.back().channel;
  for (const auto& op : p.ranks[0].threadblocks[0].ops)
    if (op.kind == OpKind::Wait) wait.channel = op.channel;
  p.ranks[0].threadblocks[1].ops.push_back(wait);
  EXPECT_NE(analyzePlan(p, 8, 132, 512).reason.find("is waited on by several thread blocks"),
            std::string::npos);
}

}  // namespace
}  // namespace meshcomm::plan
