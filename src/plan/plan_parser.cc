// The plan parser: JSON text -> meshcomm::plan structs, checking each field's type and range and every
// object's keys; the rules that relate fields to each other are in plan_checks.cc.
#include <climits>

#include "base/bounded_file.hpp"
#include "base/bounded_text.hpp"
#include "base/error_message.hpp"
#include "meshcomm/plan.hpp"
#include "plan/plan_checks.hpp"
#include "plan/plan_json.hpp"

namespace meshcomm::plan {

namespace {

using detail::json;
using detail::Node;

constexpr uint64_t kMaxCount = UINT64_MAX;

// The plan's name for messages, when the document has a usable one.
std::string peekName(const json& root) {
  if (!root.is_object()) return "";
  const auto it = root.find("name");
  return it != root.end() && it->is_string() ? it->get<std::string>() : "";
}

void readFormat(const Node& root) {
  const Node format = root.member("format");
  if (format.toString() != kFormatName)
    format.fail("expected \"", kFormatName, "\", got ", describeJson(format.value()));
  const Node version = root.member("version");
  if (version.toUnsigned(0, kMaxCount) != static_cast<uint64_t>(kFormatVersion))
    version.fail("version ", describeJson(version.value()), " is not supported (this loader reads version ",
                 kFormatVersion, ")");
}

ChunkRef readChunkRef(const Node& n) {
  n.expectKeys({"buffer", "index", "size"});
  ChunkRef ref;
  ref.buffer = n.member("buffer").toName(detail::kBufferNames, "buffer");
  ref.index = n.member("index").toUnsigned(0, kMaxCount);
  ref.size = n.member("size").toUnsigned(1, kMaxCount);
  return ref;
}

std::vector<ChunkRef> readChunkRefs(const Node& n) {
  std::vector<ChunkRef> refs(n.arraySize());
  for (size_t i = 0; i < refs.size(); ++i) refs[i] = readChunkRef(n.element(i));
  return refs;
}

std::vector<int> readBlockIds(const Node& n) {
  std::vector<int> ids(n.arraySize(kMaxThreadBlocks));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = n.element(i).toInt(0, kMaxThreadBlocks - 1);
  return ids;
}

Op readOp(const Node& n) {
  Op op;
  op.kind = n.member("op").toName(detail::kOpNames, "op");
  std::vector<std::string_view> keys = {"op"};
  const auto& fields = detail::opFields(op.kind);
  keys.insert(keys.end(), fields.begin(), fields.end());
  n.expectKeys(keys);
  const auto has = [&op](const char* field) { return detail::opHasField(op.kind, field); };
  if (has("channel")) op.channel = n.member("channel").toInt(0, INT_MAX);
  if (has("relaxed")) op.relaxed = n.member("relaxed").toBool();
  if (has("src")) op.src = readChunkRef(n.member("src"));
  if (has("dst")) op.dst = readChunkRef(n.member("dst"));
  if (has("srcs")) op.srcs = readChunkRefs(n.member("srcs"));
  if (has("packets")) op.packets = readChunkRefs(n.member("packets"));
  if (has("threadblocks")) op.threadblocks = readBlockIds(n.member("threadblocks"));
  return op;
}

ThreadBlock readThreadBlock(const Node& n, size_t position) {
  n.expectKeys({"id", "ops"});
  ThreadBlock tb;
  const Node id = n.member("id");
  tb.id = id.toInt(0, kMaxThreadBlocks - 1);
  if (static_cast<size_t>(tb.id) != position)
    id.fail("thread block ", tb.id, " listed at position ", position);
  const Node ops = n.member("ops");
  tb.ops.resize(ops.arraySize());
  for (size_t i = 0; i < tb.ops.size(); ++i) tb.ops[i] = readOp(ops.element(i));
  return tb;
}

Channel readChannel(const Node& n) {
  n.expectKeys({"type", "peer", "index"});
  Channel ch;
  ch.type = n.member("type").toName(detail::kChannelTypeNames, "channel type");
  ch.peer = n.member("peer").toInt(0, kMaxRanks - 1);
  ch.index = n.member("index").toInt(0, INT_MAX);
  return ch;
}

RankPlan readRank(const Node& n, size_t position) {
  n.expectKeys({"rank", "scratch_chunks", "channels", "threadblocks"});
  RankPlan rank;
  const Node id = n.member("rank");
  rank.rank = id.toInt(0, kMaxRanks - 1);
  if (static_cast<size_t>(rank.rank) != position)
    id.fail("rank ", rank.rank, " listed at position ", position);
  rank.scratchChunks = n.member("scratch_chunks").toUnsigned(0, kMaxCount);
  const Node channels = n.member("channels");
  rank.channels.resize(channels.arraySize());
  for (size_t i = 0; i < rank.channels.size(); ++i) rank.channels[i] = readChannel(channels.element(i));
  const Node blocks = n.member("threadblocks");
  rank.threadblocks.resize(blocks.arraySize(kMaxThreadBlocks));
  for (size_t i = 0; i < rank.threadblocks.size(); ++i)
    rank.threadblocks[i] = readThreadBlock(blocks.element(i), i);
  return rank;
}

void readThreadsPerBlock(const Node& n, Plan& plan) {
  plan.numThreadsPerBlock = n.toInt(kMinThreadsPerBlock, kMaxThreadsPerBlock);
  if (plan.numThreadsPerBlock % 32 != 0) n.fail(plan.numThreadsPerBlock, " is not a multiple of 32");
}

void readRanks(const Node& n, Plan& plan) {
  const size_t count = n.arraySize();
  if (count != static_cast<size_t>(plan.numRanks))
    n.fail(count, " entries, num_ranks is ", plan.numRanks, " (one entry per rank)");
  plan.ranks.resize(count);
  for (size_t i = 0; i < count; ++i) plan.ranks[i] = readRank(n.element(i), i);
}

Plan readPlan(const Node& root) {
  if (!root.value().is_object()) root.fail("expected an object, got ", describeJson(root.value()));
  readFormat(root);
  root.expectKeys({"format", "version", "name", "collective", "num_ranks", "protocol", "inplace", "instances",
                   "chunks_per_unit", "input_chunks", "output_chunks", "min_message_size", "max_message_size",
                   "num_threads_per_block", "ranks"});
  Plan plan;
  const Node name = root.member("name");
  plan.name = name.toString();
  if (plan.name.empty()) name.fail("must not be empty");
  plan.collective = root.member("collective").toName(detail::kCollectiveNames, "collective");
  plan.numRanks = root.member("num_ranks").toInt(1, kMaxRanks);
  plan.protocol = root.member("protocol").toName(detail::kProtocolNames, "protocol");
  plan.inplace = root.member("inplace").toBool();
  plan.instances = root.member("instances").toUnsigned(1, kMaxCount);
  plan.chunksPerUnit = root.member("chunks_per_unit").toUnsigned(1, kMaxCount);
  plan.inputChunks = root.member("input_chunks").toUnsigned(0, kMaxCount);
  plan.outputChunks = root.member("output_chunks").toUnsigned(0, kMaxCount);
  plan.minMessageSize = root.member("min_message_size").toUnsigned(0, kMaxCount);
  plan.maxMessageSize = root.member("max_message_size").toUnsigned(0, kMaxCount);
  readThreadsPerBlock(root.member("num_threads_per_block"), plan);
  readRanks(root.member("ranks"), plan);
  return plan;
}

}  // namespace

Plan parsePlan(std::string_view text, uint64_t* hash) {
  const json root = detail::parseJsonText(text);
  const std::string name = peekName(root);
  Plan plan = readPlan(Node(root, "", name));
  detail::checkPlan(plan);
  if (hash) *hash = detail::documentHash(root);
  return plan;
}

Plan loadPlan(const std::string& path, uint64_t* hash) {
  const std::string text = readBoundedFile(path, "plan file");
  try {
    return parsePlan(text, hash);
  } catch (const Error& e) {
    throw Error(e.code(), "plan file " + quotedPath(path) + ": " + messageOf(e));
  }
}

}  // namespace meshcomm::plan
