// Plan loader: parsing meshcomm.plan documents into structs, every rejection rule with the JSON path it
// names, the plan hash, and loading from files (CPU only).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/bounded_file.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/plan.hpp"

namespace meshcomm::plan {
namespace {

using json = nlohmann::json;

json chunk(const char* buffer, uint64_t index, uint64_t size = 1) {
  return {{"buffer", buffer}, {"index", index}, {"size", size}};
}

json channel(const char* type, int peer, int index = 0) {
  return {{"type", type}, {"peer", peer}, {"index", index}};
}

// Rank r of the 2-rank one-shot LL allreduce of docs/dsl.md: packets to the peer's scratch chunk r, then a
// reduction of the own input with the packets from the peer (scratch chunk 1 - r).
json oneShotRank(int r) {
  const json putPackets = {
      {"op", "put_packets"}, {"channel", 0}, {"src", chunk("input", 0)}, {"dst", chunk("scratch", r)}};
  const json reducePackets = {{"op", "reduce_packets"},
                              {"dst", chunk("output", 0)},
                              {"srcs", {chunk("input", 0)}},
                              {"packets", {chunk("scratch", 1 - r)}}};
  return {{"rank", r},
          {"scratch_chunks", 2},
          {"channels", {channel("memory", 1 - r)}},
          {"threadblocks", {{{"id", 0}, {"ops", {putPackets, reducePackets}}}}}};
}

json minimalPlan() {
  return {{"format", "meshcomm.plan"},
          {"version", 1},
          {"name", "allreduce_allpairs_ll"},
          {"collective", "allreduce"},
          {"num_ranks", 2},
          {"protocol", "LL"},
          {"inplace", false},
          {"instances", 1},
          {"chunks_per_unit", 1},
          {"input_chunks", 1},
          {"output_chunks", 1},
          {"min_message_size", 0},
          {"max_message_size", 1048576},
          {"num_threads_per_block", 512},
          {"ranks", {oneShotRank(0), oneShotRank(1)}}};
}

// Rank 0 runs one op of every kind in block 0 (block 1 joins the barrier); rank 1 only holds the channels.
json everyOpPlan() {
  json plan = minimalPlan();
  plan["name"] = "every_op";
  plan["input_chunks"] = 4;
  plan["output_chunks"] = 4;
  const json ops = {
      {{"op", "copy"}, {"src", chunk("input", 0)}, {"dst", chunk("output", 0)}},
      {{"op", "reduce"}, {"srcs", {chunk("input", 0), chunk("scratch", 2)}}, {"dst", chunk("output", 1)}},
      {{"op", "put"}, {"channel", 1}, {"src", chunk("scratch", 1)}, {"dst", chunk("scratch", 0)}},
      {{"op", "get"}, {"channel", 0}, {"src", chunk("input", 2, 2)}, {"dst", chunk("output", 2, 2)}},
      {{"op", "signal"}, {"channel", 1}, {"relaxed", true}},
      {{"op", "wait"}, {"channel", 0}, {"relaxed", false}},
      {{"op", "flush"}, {"channel", 1}},
      {{"op", "put_packets"}, {"channel", 0}, {"src", chunk("input", 3)}, {"dst", chunk("scratch", 0)}},
      {{"op", "unpack_packets"}, {"src", chunk("scratch", 1)}, {"dst", chunk("output", 3)}},
      {{"op", "reduce_packets"},
       {"srcs", json::array()},
       {"packets", {chunk("scratch", 0), chunk("scratch", 1)}},
       {"dst", chunk("output", 0)}},
      {{"op", "barrier"}, {"threadblocks", {1, 0}}},
  };
  const json barrier = {{"op", "barrier"}, {"threadblocks", {0, 1}}};
  json& rank0 = plan["ranks"][0];
  rank0["scratch_chunks"] = 3;
  rank0["channels"] = {channel("memory", 1), channel("port", 1)};
  rank0["threadblocks"] = {{{"id", 0}, {"ops", ops}}, {{"id", 1}, {"ops", {barrier}}}};
  json& rank1 = plan["ranks"][1];
  rank1["scratch_chunks"] = 1;
  rank1["channels"] = {channel("memory", 0), channel("port", 0)};
  rank1["threadblocks"] = json::array();
  return plan;
}

json& opAt(json& plan, int rank, int tb, int index) {
  return plan["ranks"][rank]["threadblocks"][tb]["ops"][index];
}

// parsePlan rejects `plan` with an error naming `path` and containing `reason`.
void expectRejected(const json& plan, const std::string& path, const std::string& reason) {
  const std::string where = "plan \"" + plan.value("name", std::string()) + "\": " + path + ": ";
  try {
    parsePlan(plan.dump());
    ADD_FAILURE() << "accepted; expected an error at " << path;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << message;
    EXPECT_NE(message.find(where), std::string::npos) << "expected '" << where << "' in: " << message;
    EXPECT_NE(message.find(reason), std::string::npos) << "expected '" << reason << "' in: " << message;
  }
}

// parsePlan rejects `text` with an error containing `reason`.
void expectTextRejected(const std::string& text, const std::string& reason) {
  try {
    parsePlan(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

void expectRef(const ChunkRef& ref, BufferKind buffer, uint64_t index, uint64_t size) {
  EXPECT_EQ(ref.buffer, buffer);
  EXPECT_EQ(ref.index, index);
  EXPECT_EQ(ref.size, size);
}

std::string writeTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// ---- valid plans --------------------------------------------------------------------------------------

TEST(PlanLoader, MinimalPlanParsesEveryField) {
  const Plan plan = parsePlan(minimalPlan().dump());
  EXPECT_EQ(plan.name, "allreduce_allpairs_ll");
  EXPECT_EQ(plan.collective, Collective::AllReduce);
  EXPECT_EQ(plan.numRanks, 2);
  EXPECT_EQ(plan.protocol, Protocol::LL);
  EXPECT_FALSE(plan.inplace);
  EXPECT_EQ(plan.instances, 1u);
  EXPECT_EQ(plan.chunksPerUnit, 1u);
  EXPECT_EQ(plan.inputChunks, 1u);
  EXPECT_EQ(plan.outputChunks, 1u);
  EXPECT_EQ(plan.minMessageSize, 0u);
  EXPECT_EQ(plan.maxMessageSize, 1048576u);
  EXPECT_EQ(plan.numThreadsPerBlock, 512);
  ASSERT_EQ(plan.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const RankPlan& rank = plan.ranks[r];
    EXPECT_EQ(rank.rank, r);
    EXPECT_EQ(rank.scratchChunks, 2u);
    ASSERT_EQ(rank.channels.size(), 1u);
    EXPECT_EQ(rank.channels[0].type, ChannelType::Memory);
    EXPECT_EQ(rank.channels[0].peer, 1 - r);
    EXPECT_EQ(rank.channels[0].index, 0);
    ASSERT_EQ(rank.threadblocks.size(), 1u);
    EXPECT_EQ(rank.threadblocks[0].id, 0);
    const auto& ops = rank.threadblocks[0].ops;
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(ops[0].kind, OpKind::PutPackets);
    EXPECT_EQ(ops[0].channel, 0);
    expectRef(ops[0].src, BufferKind::Input, 0, 1);
    expectRef(ops[0].dst, BufferKind::Scratch, r, 1);
    EXPECT_EQ(ops[1].kind, OpKind::ReducePackets);
    EXPECT_EQ(ops[1].channel, -1);
    expectRef(ops[1].dst, BufferKind::Output, 0, 1);
    ASSERT_EQ(ops[1].srcs.size(), 1u);
    expectRef(ops[1].srcs[0], BufferKind::Input, 0, 1);
    ASSERT_EQ(ops[1].packets.size(), 1u);
    expectRef(ops[1].packets[0], BufferKind::Scratch, 1 - r, 1);
  }
}

TEST(PlanLoader, TopLevelValuesAsWritten) {
  json doc = minimalPlan();
  doc["collective"] = "reduce_scatter";
  doc["protocol"] = "Simple";
  doc["inplace"] = true;
  doc["instances"] = 3;
  doc["chunks_per_unit"] = 2;
  doc["input_chunks"] = 4;
  doc["output_chunks"] = 2;
  doc["min_message_size"] = 4096;
  doc["max_message_size"] = 1ull << 40;
  doc["num_threads_per_block"] = 1024;
  for (auto& rank : doc["ranks"]) rank["threadblocks"] = json::array();
  const Plan plan = parsePlan(doc.dump());
  EXPECT_EQ(plan.collective, Collective::ReduceScatter);
  EXPECT_EQ(plan.protocol, Protocol::Simple);
  EXPECT_TRUE(plan.inplace);
  EXPECT_EQ(plan.instances, 3u);
  EXPECT_EQ(plan.chunksPerUnit, 2u);
  EXPECT_EQ(plan.inputChunks, 4u);
  EXPECT_EQ(plan.outputChunks, 2u);
  EXPECT_EQ(plan.minMessageSize, 4096u);
  EXPECT_EQ(plan.maxMessageSize, 1ull << 40);
  EXPECT_EQ(plan.numThreadsPerBlock, 1024);
  EXPECT_TRUE(plan.ranks[0].threadblocks.empty());
}

TEST(PlanLoader, CollectiveNames) {
  const std::pair<const char*, Collective> names[] = {{"allreduce", Collective::AllReduce},
                                                      {"allgather", Collective::AllGather},
                                                      {"reduce_scatter", Collective::ReduceScatter},
                                                      {"alltoall", Collective::AllToAll}};
  for (const auto& [name, collective] : names) {
    json doc = minimalPlan();
    doc["collective"] = name;
    EXPECT_EQ(parsePlan(doc.dump()).collective, collective) << name;
  }
}

TEST(PlanLoader, EveryOpKind) {
  const Plan plan = parsePlan(everyOpPlan().dump());
  const RankPlan& rank = plan.ranks[0];
  ASSERT_EQ(rank.channels.size(), 2u);
  EXPECT_EQ(rank.channels[1].type, ChannelType::Port);
  ASSERT_EQ(rank.threadblocks.size(), 2u);
  const auto& ops = rank.threadblocks[0].ops;
  const OpKind kinds[] = {OpKind::Copy,          OpKind::Reduce,        OpKind::Put,    OpKind::Get,
                          OpKind::Signal,        OpKind::Wait,          OpKind::Flush,  OpKind::PutPackets,
                          OpKind::UnpackPackets, OpKind::ReducePackets, OpKind::Barrier};
  ASSERT_EQ(ops.size(), std::size(kinds));
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(ops[i].kind, kinds[i]) << "op " << i;

  expectRef(ops[0].src, BufferKind::Input, 0, 1);
  expectRef(ops[0].dst, BufferKind::Output, 0, 1);
  EXPECT_EQ(ops[0].channel, -1);
  ASSERT_EQ(ops[1].srcs.size(), 2u);
  expectRef(ops[1].srcs[1], BufferKind::Scratch, 2, 1);
  EXPECT_EQ(ops[2].channel, 1);
  expectRef(ops[3].src, BufferKind::Input, 2, 2);
  expectRef(ops[3].dst, BufferKind::Output, 2, 2);
  EXPECT_EQ(ops[4].channel, 1);
  EXPECT_TRUE(ops[4].relaxed);
  EXPECT_EQ(ops[5].channel, 0);
  EXPECT_FALSE(ops[5].relaxed);
  EXPECT_EQ(ops[6].channel, 1);
  expectRef(ops[8].src, BufferKind::Scratch, 1, 1);
  EXPECT_TRUE(ops[9].srcs.empty());
  EXPECT_EQ(ops[9].packets.size(), 2u);
  EXPECT_EQ(ops[10].threadblocks, (std::vector<int>{1, 0}));
  EXPECT_EQ(rank.threadblocks[1].ops[0].threadblocks, (std::vector<int>{0, 1}));
}

TEST(PlanLoader, OpNames) {
  EXPECT_STREQ(opName(OpKind::Copy), "copy");
  EXPECT_STREQ(opName(OpKind::Reduce), "reduce");
  EXPECT_STREQ(opName(OpKind::Put), "put");
  EXPECT_STREQ(opName(OpKind::Get), "get");
  EXPECT_STREQ(opName(OpKind::Signal), "signal");
  EXPECT_STREQ(opName(OpKind::Wait), "wait");
  EXPECT_STREQ(opName(OpKind::Flush), "flush");
  EXPECT_STREQ(opName(OpKind::PutPackets), "put_packets");
  EXPECT_STREQ(opName(OpKind::UnpackPackets), "unpack_packets");
  EXPECT_STREQ(opName(OpKind::ReducePackets), "reduce_packets");
  EXPECT_STREQ(opName(OpKind::Barrier), "barrier");
}

// ---- the document and its keys ------------------------------------------------------------------------

TEST(PlanLoaderRejects, InvalidJson) {
  expectTextRejected("{\"format\": \"meshcomm.plan\",", "plan: not valid JSON");
}

TEST(PlanLoaderRejects, DeepNesting) {
  expectTextRejected(std::string(100, '[') + std::string(100, ']'), "nested deeper than 32 levels");
}

TEST(PlanLoaderRejects, NonObjectDocument) {
  expectTextRejected("[1, 2]", "plan: expected an object, got an array");
}

TEST(PlanLoaderRejects, WrongFormat) {
  json doc = minimalPlan();
  doc["format"] = "meshcomm.selection";
  expectRejected(doc, "format", "expected \"meshcomm.plan\", got \"meshcomm.selection\"");
}

TEST(PlanLoaderRejects, WrongVersion) {
  json doc = minimalPlan();
  doc["version"] = 2;
  expectRejected(doc, "version", "version 2 is not supported (this loader reads version 1)");
}

TEST(PlanLoaderRejects, UnknownTopLevelKey) {
  json doc = minimalPlan();
  doc["comment"] = "x";
  expectRejected(doc, "comment", "unknown key");
}

TEST(PlanLoaderRejects, MissingKey) {
  json doc = minimalPlan();
  doc.erase("protocol");
  expectRejected(doc, "protocol", "missing");
}

TEST(PlanLoaderRejects, UnknownRankChannelAndChunkKeys) {
  json doc = minimalPlan();
  doc["ranks"][1]["gpu"] = 0;
  expectRejected(doc, "ranks[1].gpu", "unknown key");
  doc = minimalPlan();
  doc["ranks"][0]["channels"][0]["weight"] = 1;
  expectRejected(doc, "ranks[0].channels[0].weight", "unknown key");
  doc = minimalPlan();
  opAt(doc, 0, 0, 0)["src"]["offset"] = 0;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].src.offset", "unknown key");
}

TEST(PlanLoaderRejects, FieldOfAnotherOp) {
  json doc = minimalPlan();
  opAt(doc, 0, 0, 0)["relaxed"] = false;  // put_packets has no "relaxed"
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].relaxed", "unknown key");
}

TEST(PlanLoaderRejects, MissingOpField) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 4).erase("relaxed");
  expectRejected(doc, "ranks[0].threadblocks[0].ops[4].relaxed", "missing");
}

TEST(PlanLoaderRejects, UnknownOp) {
  json doc = minimalPlan();
  opAt(doc, 0, 0, 1)["op"] = "multicast";
  expectRejected(doc, "ranks[0].threadblocks[0].ops[1].op", "unknown op \"multicast\" (known: copy, reduce");
}

// ---- value types and ranges ---------------------------------------------------------------------------

TEST(PlanLoaderRejects, NegativeNumber) {
  json doc = minimalPlan();
  doc["ranks"][0]["scratch_chunks"] = -1;
  expectRejected(doc, "ranks[0].scratch_chunks", "must not be negative, got -1");
}

TEST(PlanLoaderRejects, NonIntegerNumber) {
  json doc = minimalPlan();
  doc["instances"] = 1.5;
  expectRejected(doc, "instances", "expected a non-negative integer, got 1.5");
  doc["instances"] = "1";
  expectRejected(doc, "instances", "expected a non-negative integer, got \"1\"");
}

TEST(PlanLoaderRejects, NumberTooLargeForUint64) {
  std::string text = minimalPlan().dump();
  const std::string key = "\"max_message_size\":1048576";
  text.replace(text.find(key), key.size(), "\"max_message_size\":18446744073709551616");
  expectTextRejected(text, "max_message_size: expected a non-negative integer, got 1.8446744073709552e+19");
}

TEST(PlanLoaderRejects, WrongTypes) {
  json doc = minimalPlan();
  doc["inplace"] = 0;
  expectRejected(doc, "inplace", "expected true or false, got 0");
  doc = minimalPlan();
  doc["name"] = 7;
  expectTextRejected(doc.dump(), "plan: name: expected a string, got 7");
  doc = minimalPlan();
  doc["ranks"] = json::object();
  expectRejected(doc, "ranks", "expected an array, got an object");
  doc = minimalPlan();
  doc["ranks"][0]["threadblocks"][0] = 3;
  expectRejected(doc, "ranks[0].threadblocks[0]", "expected an object, got 3");
}

TEST(PlanLoaderRejects, EmptyName) {
  json doc = minimalPlan();
  doc["name"] = "";
  expectTextRejected(doc.dump(), "plan: name: must not be empty");
}

TEST(PlanLoaderRejects, UnsupportedCollective) {
  json doc = minimalPlan();
  doc["collective"] = "broadcast";
  expectRejected(doc, "collective",
                 "unknown collective \"broadcast\" (known: allreduce, allgather, reduce_scatter, alltoall)");
}

TEST(PlanLoaderRejects, UnknownProtocol) {
  json doc = minimalPlan();
  doc["protocol"] = "LL128";
  expectRejected(doc, "protocol", "unknown protocol \"LL128\" (known: Simple, LL)");
}

TEST(PlanLoaderRejects, NumRanksOutOfRange) {
  json doc = minimalPlan();
  doc["num_ranks"] = 0;
  expectRejected(doc, "num_ranks", "0 is outside 1..64");
  doc["num_ranks"] = 65;
  expectRejected(doc, "num_ranks", "65 is outside 1..64");
}

TEST(PlanLoaderRejects, ZeroInstancesAndChunksPerUnit) {
  json doc = minimalPlan();
  doc["instances"] = 0;
  expectRejected(doc, "instances", "0 is outside 1..");
  doc = minimalPlan();
  doc["chunks_per_unit"] = 0;
  expectRejected(doc, "chunks_per_unit", "0 is outside 1..");
}

TEST(PlanLoaderRejects, ThreadsPerBlock) {
  json doc = minimalPlan();
  doc["num_threads_per_block"] = 16;
  expectRejected(doc, "num_threads_per_block", "16 is outside 32..1024");
  doc["num_threads_per_block"] = 2048;
  expectRejected(doc, "num_threads_per_block", "2048 is outside 32..1024");
  doc["num_threads_per_block"] = 100;
  expectRejected(doc, "num_threads_per_block", "100 is not a multiple of 32");
}

TEST(PlanLoaderRejects, ChunkSizeZero) {
  json doc = minimalPlan();
  opAt(doc, 1, 0, 0)["src"]["size"] = 0;
  expectRejected(doc, "ranks[1].threadblocks[0].ops[0].src.size", "0 is outside 1..");
}

TEST(PlanLoaderRejects, UnknownBuffer) {
  json doc = minimalPlan();
  opAt(doc, 0, 0, 1)["dst"]["buffer"] = "temp";
  expectRejected(doc, "ranks[0].threadblocks[0].ops[1].dst.buffer",
                 "unknown buffer \"temp\" (known: input, output, scratch)");
}

TEST(PlanLoaderRejects, RelaxedNotBoolean) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 5)["relaxed"] = "no";
  expectRejected(doc, "ranks[0].threadblocks[0].ops[5].relaxed", "expected true or false, got \"no\"");
}

// ---- structure ----------------------------------------------------------------------------------------

TEST(PlanLoaderRejects, RankCountDiffersFromNumRanks) {
  json doc = minimalPlan();
  doc["ranks"].erase(1);
  expectRejected(doc, "ranks", "1 entries, num_ranks is 2");
}

TEST(PlanLoaderRejects, RankOutOfPosition) {
  json doc = minimalPlan();
  std::swap(doc["ranks"][0], doc["ranks"][1]);
  expectRejected(doc, "ranks[0].rank", "rank 1 listed at position 0");
}

TEST(PlanLoaderRejects, ThreadBlockIdsOutOfOrder) {
  json doc = everyOpPlan();
  doc["ranks"][0]["threadblocks"][1]["id"] = 2;
  expectRejected(doc, "ranks[0].threadblocks[1].id", "thread block 2 listed at position 1");
}

TEST(PlanLoaderRejects, TooManyThreadBlocks) {
  json doc = minimalPlan();
  json& blocks = doc["ranks"][0]["threadblocks"];
  for (int id = 1; id <= kMaxThreadBlocks; ++id) blocks.push_back({{"id", id}, {"ops", json::array()}});
  expectRejected(doc, "ranks[0].threadblocks", "129 entries, at most 128 allowed");
}

TEST(PlanLoaderRejects, ChunkCountsNotMultiplesOfChunksPerUnit) {
  json doc = minimalPlan();
  doc["chunks_per_unit"] = 2;
  doc["input_chunks"] = 3;
  expectRejected(doc, "input_chunks", "3 is not a multiple of chunks_per_unit 2");
  doc["input_chunks"] = 4;
  doc["output_chunks"] = 5;
  expectRejected(doc, "output_chunks", "5 is not a multiple of chunks_per_unit 2");
}

TEST(PlanLoaderRejects, MinMessageSizeAboveMax) {
  json doc = minimalPlan();
  doc["min_message_size"] = 4096;
  doc["max_message_size"] = 1024;
  expectRejected(doc, "min_message_size", "4096 is larger than max_message_size 1024");
}

TEST(PlanLoaderRejects, ChannelToItself) {
  json doc = minimalPlan();
  doc["ranks"][1]["channels"][0]["peer"] = 1;
  expectRejected(doc, "ranks[1].channels[0].peer", "a channel of rank 1 to itself");
}

TEST(PlanLoaderRejects, ChannelToMissingRank) {
  json doc = minimalPlan();
  doc["ranks"][0]["channels"][0]["peer"] = 5;
  expectRejected(doc, "ranks[0].channels[0].peer", "rank 5 does not exist (num_ranks is 2)");
  doc["ranks"][0]["channels"][0]["peer"] = 64;
  expectRejected(doc, "ranks[0].channels[0].peer", "64 is outside 0..63");
}

TEST(PlanLoaderRejects, DuplicateChannel) {
  json doc = minimalPlan();
  doc["ranks"][0]["channels"].push_back(channel("memory", 1));
  expectRejected(doc, "ranks[0].channels[1]", "the same type, peer and index as ranks[0].channels[0]");
}

TEST(PlanLoaderRejects, UnknownChannelType) {
  json doc = minimalPlan();
  doc["ranks"][0]["channels"][0]["type"] = "switch";
  expectRejected(doc, "ranks[0].channels[0].type", "unknown channel type \"switch\" (known: memory, port)");
}

// ---- per-op rules -------------------------------------------------------------------------------------

TEST(PlanLoaderRejects, OpChannelOutsideChannelList) {
  json doc = minimalPlan();
  opAt(doc, 1, 0, 0)["channel"] = 1;
  expectRejected(doc, "ranks[1].threadblocks[0].ops[0].channel", "1 is outside rank 1's 1 channels");
}

TEST(PlanLoaderRejects, GetOnPortChannel) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 3)["channel"] = 1;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[3].channel",
                 "get needs a memory channel, channel 1 is a port channel to rank 1");
}

TEST(PlanLoaderRejects, PutPacketsOnPortChannel) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 7)["channel"] = 1;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[7].channel", "put_packets needs a memory channel");
}

TEST(PlanLoaderRejects, FlushOnMemoryChannel) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 6)["channel"] = 0;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[6].channel",
                 "flush needs a port channel, channel 0 is a memory channel to rank 1");
}

TEST(PlanLoaderRejects, PortPutOutsideScratch) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 2)["src"] = chunk("input", 1);
  expectRejected(
      doc, "ranks[0].threadblocks[0].ops[2].src.buffer",
      "put on a port channel moves scratch to the peer's scratch (its proxy copies registered memory "
      "only), got input");
  doc = everyOpPlan();
  opAt(doc, 0, 0, 2)["dst"] = chunk("output", 2);
  expectRejected(doc, "ranks[0].threadblocks[0].ops[2].dst.buffer", "got output");
}

TEST(PlanLoaderRejects, PacketsInSimplePlan) {
  json doc = minimalPlan();
  doc["protocol"] = "Simple";
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].op",
                 "put_packets needs protocol LL, the plan's is Simple");
  doc = everyOpPlan();
  doc["protocol"] = "Simple";
  opAt(doc, 0, 0, 7) = {{"op", "copy"}, {"src", chunk("input", 3)}, {"dst", chunk("output", 3)}};
  expectRejected(doc, "ranks[0].threadblocks[0].ops[8].op", "unpack_packets needs protocol LL");
}

TEST(PlanLoaderRejects, PacketReferencesOutsideScratch) {
  json doc = minimalPlan();
  opAt(doc, 0, 0, 0)["dst"] = chunk("output", 0);
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].dst.buffer",
                 "put_packets needs packets in scratch, got output");
  doc = minimalPlan();
  opAt(doc, 0, 0, 1)["packets"][0] = chunk("input", 0);
  expectRejected(doc, "ranks[0].threadblocks[0].ops[1].packets[0].buffer",
                 "reduce_packets needs packets in scratch, got input");
  doc = everyOpPlan();
  opAt(doc, 0, 0, 8)["src"] = chunk("input", 0);
  expectRejected(doc, "ranks[0].threadblocks[0].ops[8].src.buffer",
                 "unpack_packets needs packets in scratch");
}

TEST(PlanLoaderRejects, ReduceWithOneSource) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 1)["srcs"].erase(1);
  expectRejected(doc, "ranks[0].threadblocks[0].ops[1].srcs", "reduce needs at least 2 entries, got 1");
}

TEST(PlanLoaderRejects, ReducePacketsWithoutPackets) {
  json doc = minimalPlan();
  opAt(doc, 0, 0, 1)["packets"] = json::array();
  expectRejected(doc, "ranks[0].threadblocks[0].ops[1].packets",
                 "reduce_packets needs at least 1 entries, got 0");
}

TEST(PlanLoaderRejects, LocalIndexOutsideBuffer) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 0)["src"]["index"] = 7;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].src.index", "7 is outside input's 4 chunks");
  doc = everyOpPlan();
  opAt(doc, 0, 0, 1)["srcs"][1]["index"] = 3;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[1].srcs[1].index", "3 is outside scratch's 3 chunks");
}

TEST(PlanLoaderRejects, RangeRunsPastBuffer) {
  json doc = everyOpPlan();
  opAt(doc, 0, 0, 3)["dst"]["size"] = 3;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[3].dst.size",
                 "3 chunks from index 2 run past output's 4 chunks");
  doc = everyOpPlan();
  opAt(doc, 0, 0, 0)["src"]["size"] = UINT64_MAX;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].src.size", "run past input's 4 chunks");
}

TEST(PlanLoaderRejects, RemoteReferenceAgainstPeerBuffer) {
  // Rank 0 has 2 scratch chunks, its peer only 1: index 1 is inside rank 0's scratch but not rank 1's.
  json doc = minimalPlan();
  doc["ranks"][1]["scratch_chunks"] = 1;
  opAt(doc, 1, 0, 1)["packets"][0]["index"] = 0;
  opAt(doc, 0, 0, 0)["dst"]["index"] = 1;
  expectRejected(doc, "ranks[0].threadblocks[0].ops[0].dst.index",
                 "1 is outside rank 1's scratch's 1 chunks");
  doc = everyOpPlan();
  opAt(doc, 0, 0, 3)["src"]["index"] = 4;  // get reads the peer's input
  expectRejected(doc, "ranks[0].threadblocks[0].ops[3].src.index", "4 is outside rank 1's input's 4 chunks");
}

TEST(PlanLoaderRejects, BarrierWithOneBlock) {
  json doc = everyOpPlan();
  opAt(doc, 0, 1, 0)["threadblocks"] = {1};
  expectRejected(doc, "ranks[0].threadblocks[1].ops[0].threadblocks", "at least 2 thread blocks, got 1");
}

TEST(PlanLoaderRejects, BarrierWithRepeatedBlock) {
  json doc = everyOpPlan();
  opAt(doc, 0, 1, 0)["threadblocks"] = {1, 0, 1};
  expectRejected(doc, "ranks[0].threadblocks[1].ops[0].threadblocks[2]", "thread block 1 is listed twice");
}

TEST(PlanLoaderRejects, BarrierWithMissingBlock) {
  json doc = everyOpPlan();
  opAt(doc, 0, 1, 0)["threadblocks"] = {0, 1, 2};
  expectRejected(doc, "ranks[0].threadblocks[1].ops[0].threadblocks[2]",
                 "thread block 2 does not exist (rank 0 has 2)");
}

TEST(PlanLoaderRejects, BarrierWithoutOwnBlock) {
  json doc = everyOpPlan();
  json& blocks = doc["ranks"][0]["threadblocks"];
  blocks.push_back({{"id", 2}, {"ops", {{{"op", "barrier"}, {"threadblocks", {0, 1}}}}}});
  expectRejected(doc, "ranks[0].threadblocks[2].ops[0].threadblocks",
                 "the barrier's own thread block 2 is not listed");
}

// ---- hash and files -----------------------------------------------------------------------------------

TEST(PlanHash, IgnoresWhitespaceAndKeyOrder) {
  const json doc = minimalPlan();
  EXPECT_EQ(planHash(doc.dump()), planHash(doc.dump(2)));
  EXPECT_EQ(planHash(R"({"b": 1, "a": [1, 2, {"y": true, "x": null}]})"),
            planHash("{\n  \"a\" : [ 1,2, { \"x\":null,\"y\":true } ],\n\t\"b\":1\n}"));
}

TEST(PlanHash, ChangesWithAnyValue) {
  json doc = minimalPlan();
  const uint64_t base = planHash(doc.dump());
  doc["max_message_size"] = 1048577;
  EXPECT_NE(planHash(doc.dump()), base);
  doc = minimalPlan();
  opAt(doc, 1, 0, 1)["packets"][0]["index"] = 1;
  EXPECT_NE(planHash(doc.dump()), base);
}

TEST(PlanHash, ParsePlanAndLoadPlanGiveTheDocumentsHash) {
  const json doc = minimalPlan();
  uint64_t parsed = 0, loaded = 0;
  parsePlan(doc.dump(2), &parsed);
  EXPECT_EQ(parsed, planHash(doc.dump()));
  const std::string path = writeTemp("meshcomm_plan_hash.json", doc.dump(4));
  loadPlan(path, &loaded);
  EXPECT_EQ(loaded, parsed);
  std::remove(path.c_str());
}

TEST(PlanHash, RejectsInvalidJson) {
  EXPECT_THROW(planHash("{\"a\": "), Error);
}

TEST(PlanFile, LoadsPlan) {
  const std::string path = writeTemp("meshcomm_plan_ok.json", minimalPlan().dump(2));
  const Plan plan = loadPlan(path);
  EXPECT_EQ(plan.name, "allreduce_allpairs_ll");
  EXPECT_EQ(plan.ranks.size(), 2u);
  std::remove(path.c_str());
}

TEST(PlanFile, MissingFileNamesPath) {
  const std::string path = testing::TempDir() + "meshcomm_no_such_plan.json";
  try {
    loadPlan(path);
    ADD_FAILURE() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::SystemError);
    EXPECT_NE(std::string(e.what()).find("plan file '" + path + "': cannot open"), std::string::npos)
        << e.what();
  }
}

TEST(PlanFile, AFileLargerThanTheLimitIsRefusedUnread) {
  const std::string path = testing::TempDir() + "meshcomm_plan_huge.json";
  { std::ofstream(path) << "{"; }
  std::filesystem::resize_file(path, kMaxConfigFileBytes + 1);  // sparse: nothing is written
  try {
    loadPlan(path);
    ADD_FAILURE() << "loaded a file past the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    EXPECT_NE(
        std::string(e.what()).find("plan file '" + path + "': " + std::to_string(kMaxConfigFileBytes + 1) +
                                   " bytes, more than the limit of " + std::to_string(kMaxConfigFileBytes)),
        std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

TEST(PlanFile, InvalidPlanNamesFileAndPath) {
  json doc = minimalPlan();
  doc["num_ranks"] = 3;
  const std::string path = writeTemp("meshcomm_plan_bad.json", doc.dump());
  try {
    loadPlan(path);
    ADD_FAILURE() << "loaded an invalid plan";
  } catch (const Error& e) {
    const std::string expected = "invalid usage: plan file '" + path +
                                 "': plan \"allreduce_allpairs_ll\": ranks: 2 entries, num_ranks is 3";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace meshcomm::plan
