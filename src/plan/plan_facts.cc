// analyzePlan (plan_facts.hpp): one pass over every rank's thread blocks; sizes with overflow checks.
#include "plan/plan_facts.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "collectives/algorithms/reduction_common.hpp"

namespace meshcomm::plan {

namespace {

constexpr uint64_t kMaxChunks = 1ull << 31;  // chunk indices and sizes travel as 32-bit values to the device

bool reachesPeer(OpKind kind) {
  return kind == OpKind::Put || kind == OpKind::Get;
}

// The remote reference of a put or get.
const ChunkRef& remoteRef(const Op& op) {
  return op.kind == OpKind::Put ? op.dst : op.src;
}

// A scratch reference other than the op's packet side (put_packets' destination, unpack_packets' source,
// reduce_packets' packets).
bool usesScratchOutsidePackets(const Op& op) {
  auto scratch = [](const ChunkRef& c) { return c.buffer == BufferKind::Scratch; };
  const bool src = op.kind != OpKind::UnpackPackets && scratch(op.src);
  const bool dst = op.kind != OpKind::PutPackets && scratch(op.dst);
  return src || dst || std::any_of(op.srcs.begin(), op.srcs.end(), scratch);
}

void note(std::string& reason, const std::string& why) {
  if (reason.empty()) reason = why;
}

}  // namespace

std::pair<uint64_t, uint64_t> collectiveUnits(const Plan& p) {
  const uint64_t r = static_cast<uint64_t>(p.numRanks);
  switch (p.collective) {
    case Collective::AllGather:
      return {1, r};
    case Collective::ReduceScatter:
      return {r, 1};
    case Collective::AllToAll:
      return {r, r};
    default:
      return {1, 1};
  }
}

uint64_t chunkElems(const Plan& plan, uint64_t n, uint64_t elemBytes) {
  const uint64_t c = reduction::ceilDiv(n, plan.chunksPerUnit);
  if (plan.protocol != Protocol::Simple || elemBytes == 0 || kChunkLineBytes % elemBytes != 0) return c;
  const uint64_t line = kChunkLineBytes / elemBytes;
  return reduction::ceilDiv(c, line) * line;
}

PlanFacts analyzePlan(const Plan& p, int channelsPerPeer, int smCount, int maxThreads) {
  PlanFacts f;
  if (p.numThreadsPerBlock > maxThreads)
    note(f.reason, "num_threads_per_block " + std::to_string(p.numThreadsPerBlock) +
                       " exceeds the executor's " + std::to_string(maxThreads));
  if (p.inputChunks >= kMaxChunks || p.outputChunks >= kMaxChunks)
    note(f.reason, "more than 2^31 chunks in a buffer");
  // The executor's chunk geometry assumes the collective's buffer sizes: units x chunks_per_unit chunks.
  const auto [inUnits, outUnits] = collectiveUnits(p);
  if (p.inputChunks != inUnits * p.chunksPerUnit || p.outputChunks != outUnits * p.chunksPerUnit)
    note(f.reason, "input_chunks " + std::to_string(p.inputChunks) + " and output_chunks " +
                       std::to_string(p.outputChunks) + " are not the collective's units x chunks_per_unit");
  for (const RankPlan& rank : p.ranks) {
    f.maxScratchChunks = std::max(f.maxScratchChunks, rank.scratchChunks);
    f.maxBlocks = std::max(f.maxBlocks, static_cast<int>(rank.threadblocks.size()));
    if (rank.threadblocks.empty())
      note(f.reason, "rank " + std::to_string(rank.rank) + " has no thread blocks");
    for (const Channel& ch : rank.channels) {
      if (ch.type == ChannelType::Port) f.portChannels = true;
      if (ch.type == ChannelType::Memory && ch.index >= channelsPerPeer)
        note(f.reason, "rank " + std::to_string(rank.rank) + " uses " + std::to_string(ch.index + 1ll) +
                           " channels to rank " + std::to_string(ch.peer) + "; the communicator has " +
                           std::to_string(channelsPerPeer) + " per peer (MESHCOMM_CHANNELS_PER_PEER)");
    }
    // One thread block per channel and direction: the waits of a channel keep a per-channel expectation.
    std::map<std::pair<int, bool>, std::set<int>> users;  // (channel, is wait) -> blocks
    for (const ThreadBlock& tb : rank.threadblocks) {
      for (const Op& op : tb.ops) {
        if (op.kind == OpKind::Signal || op.kind == OpKind::Wait)
          users[{op.channel, op.kind == OpKind::Wait}].insert(tb.id);
        if (op.kind == OpKind::Reduce || op.kind == OpKind::ReducePackets) f.reduces = true;
        if (op.srcs.size() + op.packets.size() > 16)
          note(f.reason, "rank " + std::to_string(rank.rank) + " has a reduction of more than 16 operands");
        if (reachesPeer(op.kind)) {
          if (remoteRef(op).buffer == BufferKind::Scratch) {
            f.writesPeerScratch = true;
          } else {
            f.reachesPeerBuffers = true;
          }
        }
        if (p.protocol == Protocol::LL && usesScratchOutsidePackets(op))
          note(f.reason, "rank " + std::to_string(rank.rank) +
                             " uses scratch outside packet operations in an LL "
                             "plan (an LL plan's scratch holds packets only)");
        for (const auto& c : op.packets)
          if (c.size != op.dst.size)
            note(f.reason, "rank " + std::to_string(rank.rank) +
                               ": a packet chunk range differs in size from its "
                               "destination");
      }
    }
    for (const auto& [key, blocks] : users)
      if (blocks.size() > 1)
        note(f.reason, "rank " + std::to_string(rank.rank) + ": channel " + std::to_string(key.first) +
                           " is " + (key.second ? "waited on" : "signalled") + " by several thread blocks");
  }
  if (smCount > 0 && f.maxBlocks > smCount)
    note(f.reason, std::to_string(f.maxBlocks) + " thread blocks, more than the GPU's " +
                       std::to_string(smCount) + " multiprocessors (the blocks must be resident together)");
  if (f.maxScratchChunks >= kMaxChunks) note(f.reason, "more than 2^31 scratch chunks");
  if (p.protocol == Protocol::LL) {
    const uint64_t chunkBytes = reduction::ceilDiv(p.maxMessageSize / inUnits, p.chunksPerUnit) + 16;
    uint64_t region = 0;
    const uint64_t packets = reduction::packRegionBytes(reduction::packsOf(chunkBytes));
    if (chunkBytes > (1ull << 40) ||
        __builtin_mul_overflow(packets, std::max<uint64_t>(f.maxScratchChunks, 1) * 2, &region)) {
      note(f.reason, "its LL packet region for max_message_size " + std::to_string(p.maxMessageSize) +
                         " overflows: give the LL program a max_message_size the packet buffer can hold");
    } else {
      f.packetChunkBytes = packets;
      f.packetRegionBytes = region;
    }
  }
  return f;
}

}  // namespace meshcomm::plan
