// Execution plans: the structs a `meshcomm.plan` JSON document (docs/dsl.md, "The plan") loads into, and the
// loader that builds them and re-checks the plan's structure and per-op rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshcomm/algorithm.hpp"

namespace meshcomm::plan {

constexpr const char* kFormatName = "meshcomm.plan";
constexpr int kFormatVersion = 1;
constexpr int kMaxRanks = 64;
constexpr int kMaxThreadBlocks = 128;  // per rank
constexpr int kMinThreadsPerBlock = 32;
constexpr int kMaxThreadsPerBlock = 1024;

enum class Protocol : uint8_t { Simple, LL };
enum class BufferKind : uint8_t { Input, Output, Scratch };
enum class ChannelType : uint8_t { Memory, Port };
enum class OpKind : uint8_t {
  Copy,
  Reduce,
  Put,
  Get,
  Signal,
  Wait,
  Flush,
  PutPackets,
  UnpackPackets,
  ReducePackets,
  Barrier,
};

// Chunks [index, index + size) of a buffer; chunk geometry is in docs/dsl.md ("Chunk geometry").
struct ChunkRef {
  BufferKind buffer = BufferKind::Input;
  uint64_t index = 0;
  uint64_t size = 0;
};

// A channel of a rank toward `peer`: the index-th one of its type to that peer.
struct Channel {
  ChannelType type = ChannelType::Memory;
  int peer = 0;
  int index = 0;
};

// One operation; the fields an op kind does not use keep their defaults.
struct Op {
  OpKind kind = OpKind::Copy;
  int channel = -1;  // index into RankPlan::channels; -1: the op uses no channel
  bool relaxed = false;
  ChunkRef src;
  ChunkRef dst;
  std::vector<ChunkRef> srcs;
  std::vector<ChunkRef> packets;
  std::vector<int> threadblocks;  // barrier: the blocks that meet
};

struct ThreadBlock {
  int id = 0;
  std::vector<Op> ops;
};

struct RankPlan {
  int rank = 0;
  uint64_t scratchChunks = 0;
  std::vector<Channel> channels;
  std::vector<ThreadBlock> threadblocks;
};

struct Plan {
  std::string name;
  Collective collective = Collective::AllReduce;  // AllReduce, AllGather, ReduceScatter or AllToAll
  int numRanks = 0;
  Protocol protocol = Protocol::Simple;
  bool inplace = false;
  uint64_t instances = 1;
  uint64_t chunksPerUnit = 1;
  uint64_t inputChunks = 0;
  uint64_t outputChunks = 0;
  uint64_t minMessageSize = 0;  // bytes of one rank's input
  uint64_t maxMessageSize = 0;
  int numThreadsPerBlock = 0;
  std::vector<RankPlan> ranks;  // ranks[r].rank == r
};

// Parses and checks a plan document. Throws meshcomm::Error (InvalidUsage) naming the plan and the JSON path
// of the offending value, e.g. `plan "x": ranks[2].threadblocks[1].ops[3].src.index: 7 is outside input's 4
// chunks`. With `hash`, also the document's planHash (from the same parse).
Plan parsePlan(std::string_view json, uint64_t* hash = nullptr);

// parsePlan on the contents of a file (read once); errors name the file. With `hash`, also the document's
// planHash.
Plan loadPlan(const std::string& path, uint64_t* hash = nullptr);

// A hash of the plan document's canonical JSON form (key order and whitespace do not change it), for the
// ranks to check that they all load the same plan. Throws meshcomm::Error when the text is not JSON.
uint64_t planHash(std::string_view json);

// The op's name in the plan format ("put_packets").
const char* opName(OpKind kind);

}  // namespace meshcomm::plan
