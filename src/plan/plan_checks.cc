// The rules of a parsed plan that relate fields to each other; every error names the JSON path of the value.
#include "plan/plan_checks.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "plan/plan_error.hpp"
#include "plan/plan_format.hpp"

namespace meshcomm::plan::detail {

namespace {

// Why a chunk reference must name the scratch buffer (completed to "<op> <reason>, got <buffer>").
constexpr const char* kPacketsInScratch = "needs packets in scratch";
// A port channel's proxy copies between the communicator's scratch buffers (registered memory).
constexpr const char* kPortCopiesScratch =
    "on a port channel moves scratch to the peer's scratch (its proxy copies registered memory only)";

// Where an op's chunk reference lives and which buffer it may name.
struct RefRule {
  bool remote = false;                // in the channel's peer
  const char* scratchOnly = nullptr;  // set: the reference must name scratch, for this reason
};

RefRule srcRule(OpKind kind, bool portChannel) {
  if (kind == OpKind::Get) return {true, nullptr};
  if (kind == OpKind::UnpackPackets) return {false, kPacketsInScratch};
  if (kind == OpKind::Put && portChannel) return {false, kPortCopiesScratch};
  return {};
}

RefRule dstRule(OpKind kind, bool portChannel) {
  if (kind == OpKind::Put) return {true, portChannel ? kPortCopiesScratch : nullptr};
  if (kind == OpKind::PutPackets) return {true, kPacketsInScratch};
  return {};
}

constexpr RefRule kPacketRule{false, kPacketsInScratch};

bool isPacketOp(OpKind kind) {
  return kind == OpKind::PutPackets || kind == OpKind::UnpackPackets || kind == OpKind::ReducePackets;
}

// The channel type an op needs; none when any type will do.
std::optional<ChannelType> requiredChannelType(OpKind kind) {
  if (kind == OpKind::Get || kind == OpKind::PutPackets) return ChannelType::Memory;
  if (kind == OpKind::Flush) return ChannelType::Port;
  return std::nullopt;
}

uint64_t chunkCount(const Plan& plan, const RankPlan& owner, BufferKind buffer) {
  if (buffer == BufferKind::Input) return plan.inputChunks;
  if (buffer == BufferKind::Output) return plan.outputChunks;
  return owner.scratchChunks;
}

std::string describeChannel(int index, const Channel& ch) {
  return "channel " + std::to_string(index) + " is a " + nameOf(kChannelTypeNames, ch.type) +
         " channel to rank " + std::to_string(ch.peer);
}

// The rules of one op at `path` ("ranks[0].threadblocks[1].ops[2]").
class OpChecker {
 public:
  OpChecker(const Plan& plan, const RankPlan& rank, const ThreadBlock& tb, const Op& op, std::string path)
      : plan_(plan), rank_(rank), tb_(tb), op_(op), path_(std::move(path)) {}

  void check() const {
    checkProtocol();
    if (has("channel")) checkChannel();
    const bool port = has("channel") && rank_.channels[op_.channel].type == ChannelType::Port;
    if (has("src")) checkRef(op_.src, memberPath(path_, "src"), srcRule(op_.kind, port));
    if (has("dst")) checkRef(op_.dst, memberPath(path_, "dst"), dstRule(op_.kind, port));
    if (has("srcs")) checkRefs(op_.srcs, "srcs", RefRule{}, op_.kind == OpKind::Reduce ? 2 : 0);
    if (has("packets")) checkRefs(op_.packets, "packets", kPacketRule, 1);
    if (has("threadblocks")) checkBarrier();
  }

 private:
  bool has(const char* field) const { return opHasField(op_.kind, field); }
  const char* name() const { return opName(op_.kind); }

  template <typename... Args>
  [[noreturn]] void fail(const std::string& path, Args&&... args) const {
    failAt(plan_.name, path, std::forward<Args>(args)...);
  }

  void checkProtocol() const {
    if (isPacketOp(op_.kind) && plan_.protocol != Protocol::LL)
      fail(memberPath(path_, "op"), name(), " needs protocol LL, the plan's is ",
           nameOf(kProtocolNames, plan_.protocol));
  }

  void checkChannel() const {
    const std::string path = memberPath(path_, "channel");
    if (static_cast<size_t>(op_.channel) >= rank_.channels.size())
      fail(path, op_.channel, " is outside rank ", rank_.rank, "'s ", rank_.channels.size(), " channels");
    const Channel& ch = rank_.channels[op_.channel];
    const auto needed = requiredChannelType(op_.kind);
    if (needed && ch.type != *needed)
      fail(path, name(), " needs a ", nameOf(kChannelTypeNames, *needed), " channel, ",
           describeChannel(op_.channel, ch));
  }

  void checkRef(const ChunkRef& ref, const std::string& path, RefRule rule) const {
    const char* buffer = nameOf(kBufferNames, ref.buffer);
    if (rule.scratchOnly != nullptr && ref.buffer != BufferKind::Scratch)
      fail(memberPath(path, "buffer"), name(), " ", rule.scratchOnly, ", got ", buffer);
    const RankPlan& owner = rule.remote ? plan_.ranks[rank_.channels[op_.channel].peer] : rank_;
    const std::string ownerName = rule.remote ? "rank " + std::to_string(owner.rank) + "'s " : "";
    const uint64_t count = chunkCount(plan_, owner, ref.buffer);
    if (ref.index >= count)
      fail(memberPath(path, "index"), ref.index, " is outside ", ownerName, buffer, "'s ", count, " chunks");
    if (ref.size > count - ref.index)
      fail(memberPath(path, "size"), ref.size, " chunks from index ", ref.index, " run past ", ownerName,
           buffer, "'s ", count, " chunks");
  }

  void checkRefs(const std::vector<ChunkRef>& refs, const char* field, RefRule rule, size_t minCount) const {
    const std::string path = memberPath(path_, field);
    if (refs.size() < minCount)
      fail(path, name(), " needs at least ", minCount, " entries, got ", refs.size());
    for (size_t i = 0; i < refs.size(); ++i) checkRef(refs[i], elementPath(path, i), rule);
  }

  void checkBarrier() const {
    const std::string path = memberPath(path_, "threadblocks");
    const auto& ids = op_.threadblocks;
    if (ids.size() < 2) fail(path, "a barrier lists at least 2 thread blocks, got ", ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (static_cast<size_t>(ids[i]) >= rank_.threadblocks.size())
        fail(elementPath(path, i), "thread block ", ids[i], " does not exist (rank ", rank_.rank, " has ",
             rank_.threadblocks.size(), ")");
      if (std::find(ids.begin(), ids.begin() + i, ids[i]) != ids.begin() + i)
        fail(elementPath(path, i), "thread block ", ids[i], " is listed twice");
    }
    if (std::find(ids.begin(), ids.end(), tb_.id) == ids.end())
      fail(path, "the barrier's own thread block ", tb_.id, " is not listed");
  }

  const Plan& plan_;
  const RankPlan& rank_;
  const ThreadBlock& tb_;
  const Op& op_;
  std::string path_;
};

void checkMultiple(const Plan& plan, const char* field, uint64_t chunks) {
  if (chunks % plan.chunksPerUnit != 0)
    failAt(plan.name, field, chunks, " is not a multiple of chunks_per_unit ", plan.chunksPerUnit);
}

void checkSizes(const Plan& plan) {
  checkMultiple(plan, "input_chunks", plan.inputChunks);
  checkMultiple(plan, "output_chunks", plan.outputChunks);
  if (plan.minMessageSize > plan.maxMessageSize)
    failAt(plan.name, "min_message_size", plan.minMessageSize, " is larger than max_message_size ",
           plan.maxMessageSize);
}

bool sameChannel(const Channel& a, const Channel& b) {
  return a.type == b.type && a.peer == b.peer && a.index == b.index;
}

void checkChannels(const Plan& plan, const RankPlan& rank, const std::string& rankPath) {
  const std::string path = memberPath(rankPath, "channels");
  for (size_t i = 0; i < rank.channels.size(); ++i) {
    const Channel& ch = rank.channels[i];
    const std::string peerPath = memberPath(elementPath(path, i), "peer");
    if (ch.peer == rank.rank) failAt(plan.name, peerPath, "a channel of rank ", ch.peer, " to itself");
    if (ch.peer >= plan.numRanks)
      failAt(plan.name, peerPath, "rank ", ch.peer, " does not exist (num_ranks is ", plan.numRanks, ")");
    for (size_t j = 0; j < i; ++j)
      if (sameChannel(rank.channels[j], ch))
        failAt(plan.name, elementPath(path, i), "the same type, peer and index as ", elementPath(path, j));
  }
}

void checkOps(const Plan& plan, const RankPlan& rank, const std::string& rankPath) {
  const std::string blocksPath = memberPath(rankPath, "threadblocks");
  for (size_t t = 0; t < rank.threadblocks.size(); ++t) {
    const ThreadBlock& tb = rank.threadblocks[t];
    const std::string opsPath = memberPath(elementPath(blocksPath, t), "ops");
    for (size_t o = 0; o < tb.ops.size(); ++o)
      OpChecker(plan, rank, tb, tb.ops[o], elementPath(opsPath, o)).check();
  }
}

}  // namespace

void checkPlan(const Plan& plan) {
  checkSizes(plan);
  // Every rank's channels first: remote chunk references are checked against the channel peer's buffers.
  for (size_t r = 0; r < plan.ranks.size(); ++r) checkChannels(plan, plan.ranks[r], elementPath("ranks", r));
  for (size_t r = 0; r < plan.ranks.size(); ++r) checkOps(plan, plan.ranks[r], elementPath("ranks", r));
}

}  // namespace meshcomm::plan::detail
