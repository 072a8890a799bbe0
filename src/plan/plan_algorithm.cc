// PlanAlgorithm (include/meshcomm/plan_algorithm.hpp): a loaded plan as an Algorithm. initialize() agrees on
// the plan across ranks and builds this rank's device plan; unsupportedReason() says which calls it cannot
// run; launch() computes the call's chunk geometry and launches the executor (and, for plans that touch the
// peers' call buffers, the prologue that learns them). docs/dsl.md, "The executor".
#include "meshcomm/plan_algorithm.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "collectives/algorithms/reduction_common.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "plan/device_plan.hpp"
#include "plan/plan_peer_buffers.hpp"

namespace meshcomm {

using plan::BufferKind;
using plan::OpKind;

struct PlanAlgorithm::Source {
  plan::Plan plan;
  uint64_t hash = 0;
};

namespace {

// Units of n (elements per unit) in the input and output of each collective (docs/dsl.md, "Concepts").
std::pair<uint64_t, uint64_t> unitsOf(const plan::Plan& p) {
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

bool isRemote(OpKind kind, bool dst) {
  return (kind == OpKind::Put && dst) || (kind == OpKind::Get && !dst);
}

bool hasReduction(const plan::RankPlan& rank) {
  for (const auto& tb : rank.threadblocks)
    for (const auto& op : tb.ops)
      if (op.kind == OpKind::Reduce || op.kind == OpKind::ReducePackets) return true;
  return false;
}

}  // namespace

struct PlanAlgorithm::State {
  bool initialized = false;
  int rank = 0;
  std::string reason;          // why this rank cannot run the plan at all (empty: it can)
  bool needsPeerData = false;  // a put into / get from a peer's input or output
  bool reduces = false;
  int blocks = 0;
  uint64_t maxChunkBytes = 0;  // the largest chunk of the size range (packet sizing)
  uint64_t scratchBytes = 0;   // the communicator's scratch buffer
  GpuBuffer blocksBuf, opsBuf, refsBuf, peerBuffers;
  uint64_t packetOffset = 0, packetHalfBytes = 0, packetChunkBytes = 0, slotsOffset = 0;
  uint64_t* epoch = nullptr;
  uint64_t* prologueEpoch = nullptr;
  uint64_t* barriers = nullptr;
};

std::shared_ptr<PlanAlgorithm> PlanAlgorithm::fromJson(const std::string& text) {
  auto source = std::make_shared<Source>();
  source->plan = plan::parsePlan(text);
  source->hash = plan::planHash(text);
  return std::make_shared<PlanAlgorithm>(source);
}

std::shared_ptr<PlanAlgorithm> PlanAlgorithm::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MESHCOMM_REQUIRE(in.good(), "plan file '", path, "': cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  auto source = std::make_shared<Source>();
  source->plan = plan::loadPlan(path);
  source->hash = plan::planHash(text.str());
  return std::make_shared<PlanAlgorithm>(source);
}

PlanAlgorithm::PlanAlgorithm(std::shared_ptr<const Source> source)
    : source_(std::move(source)), state_(std::make_unique<State>()) {}
PlanAlgorithm::~PlanAlgorithm() = default;

std::shared_ptr<PlanAlgorithm> PlanAlgorithm::freshInstance() const {
  return std::make_shared<PlanAlgorithm>(source_);
}
const plan::Plan& PlanAlgorithm::plan() const {
  return source_->plan;
}
std::string PlanAlgorithm::name() const {
  return source_->plan.name;
}
Collective PlanAlgorithm::collective() const {
  return source_->plan.collective;
}

void PlanAlgorithm::initialize(CommResources& resources) {
  State& s = *state_;
  const plan::Plan& p = source_->plan;
  const CommDeviceView& v = resources.view();
  s.rank = v.rank;
  s.scratchBytes = v.scratchBytes;
  // Every rank takes part in the hash agreement whatever it finds below, so the collective calls match.
  std::vector<uint64_t> hashes(v.nRanks);
  hashes[v.rank] = source_->hash;
  resources.communicator().bootstrap().allGather(hashes.data(), sizeof(uint64_t));
  for (int r = 0; r < v.nRanks; ++r) {
    MESHCOMM_REQUIRE(hashes[r] == source_->hash, "rank ", v.rank, ": plan ", p.name, ": rank ", r,
                     " loaded a different plan (hash ", hashes[r], " here ", source_->hash, ")");
  }
  s.epoch = resources.allocateDeviceWords(reduction::kLLEpochWords);
  s.prologueEpoch = resources.allocateDeviceWords(reduction::kLLEpochWords);
  s.initialized = true;
  if (p.numRanks != v.nRanks) {
    s.reason = "the plan is for " + std::to_string(p.numRanks) + " ranks";
    return;
  }
  const plan::RankPlan& mine = p.ranks[v.rank];
  s.blocks = static_cast<int>(mine.threadblocks.size());
  s.reduces = hasReduction(mine);
  const auto [inUnits, outUnits] = unitsOf(p);
  s.maxChunkBytes = (p.maxMessageSize / inUnits + p.chunksPerUnit - 1) / p.chunksPerUnit + 16;

  // Flatten this rank's thread blocks.
  std::vector<plan::BlockRecord> blocks;
  std::vector<plan::OpRecord> ops;
  std::vector<plan::RefRecord> refs;
  std::map<std::pair<std::vector<int>, int>, uint32_t> barrierIds;  // (members, occurrence) -> counter
  auto addRef = [&](const plan::ChunkRef& c) {
    refs.push_back(plan::RefRecord{c.index, static_cast<uint32_t>(c.size), static_cast<uint8_t>(c.buffer)});
  };
  for (const auto& tb : mine.threadblocks) {
    blocks.push_back(
        plan::BlockRecord{static_cast<uint32_t>(ops.size()), static_cast<uint32_t>(tb.ops.size())});
    std::map<std::vector<int>, int> seen;
    for (const auto& op : tb.ops) {
      plan::OpRecord d{};
      d.kind = static_cast<uint8_t>(op.kind);
      d.relaxed = op.relaxed ? 1 : 0;
      d.peer = -1;
      d.channel = -1;
      d.firstRef = static_cast<uint32_t>(refs.size());
      if (op.channel >= 0) {
        const plan::Channel& ch = mine.channels[op.channel];
        if (ch.type != plan::ChannelType::Memory) s.reason = "port channels are not executable yet";
        if (ch.index >= v.channelsPerPeer)
          s.reason = "it uses " + std::to_string(ch.index + 1) + " channels to rank " +
                     std::to_string(ch.peer) + "; the communicator has " + std::to_string(v.channelsPerPeer) +
                     " per peer (MESHCOMM_CHANNELS_PER_PEER)";
        d.peer = ch.peer;
        d.channel = ch.peer * v.channelsPerPeer + ch.index;
      }
      switch (op.kind) {
        case OpKind::Copy:
        case OpKind::Put:
        case OpKind::Get:
        case OpKind::PutPackets:
        case OpKind::UnpackPackets:
          addRef(op.dst);
          addRef(op.src);
          if (op.kind != OpKind::PutPackets && op.kind != OpKind::UnpackPackets) {
            const plan::ChunkRef& remote = isRemote(op.kind, true) ? op.dst : op.src;
            if ((isRemote(op.kind, true) || isRemote(op.kind, false)) && remote.buffer != BufferKind::Scratch)
              s.needsPeerData = true;
          }
          break;
        case OpKind::Reduce:
        case OpKind::ReducePackets:
          if (op.srcs.size() + op.packets.size() > 16) s.reason = "a reduction of more than 16 operands";
          addRef(op.dst);
          for (const auto& c : op.srcs) addRef(c);
          for (const auto& c : op.packets) addRef(c);
          d.numSrcs = static_cast<uint8_t>(op.srcs.size());
          d.numPackets = static_cast<uint8_t>(op.packets.size());
          break;
        case OpKind::Barrier: {
          std::vector<int> members = op.threadblocks;
          std::sort(members.begin(), members.end());
          const int occurrence = seen[members]++;
          auto key = std::make_pair(members, occurrence);
          auto it = barrierIds.find(key);
          if (it == barrierIds.end())
            it = barrierIds.emplace(key, static_cast<uint32_t>(barrierIds.size())).first;
          d.barrier = it->second;
          d.members = static_cast<uint32_t>(members.size());
          break;
        }
        default:
          break;
      }
      ops.push_back(d);
    }
  }
  auto upload = [](GpuBuffer& buf, const void* data, size_t bytes) {
    buf = GpuBuffer(std::max<size_t>(bytes, 16));
    if (bytes > 0) copyToDevice(buf.data(), data, bytes);
  };
  upload(s.blocksBuf, blocks.data(), sizeof(plan::BlockRecord) * blocks.size());
  upload(s.opsBuf, ops.data(), sizeof(plan::OpRecord) * ops.size());
  upload(s.refsBuf, refs.data(), sizeof(plan::RefRecord) * refs.size());
  s.barriers = resources.allocateDeviceWords(std::max<size_t>(barrierIds.size(), 1));

  // Every rank's buffers as mapped here: scratch now (the communicator's scratch), input and output per call.
  std::vector<char*> table(plan::kPlanBuffers * v.nRanks, nullptr);
  std::vector<void*> peerScratch(v.nRanks);
  MESHCOMM_CUDA_CHECK(
      cudaMemcpy(peerScratch.data(), v.peerScratch, sizeof(void*) * v.nRanks, cudaMemcpyDeviceToHost));
  for (int r = 0; r < v.nRanks; ++r)
    table[static_cast<int>(BufferKind::Scratch) * v.nRanks + r] = static_cast<char*>(peerScratch[r]);
  upload(s.peerBuffers, table.data(), sizeof(char*) * table.size());

  if (p.protocol == plan::Protocol::LL) {
    s.packetChunkBytes = reduction::packRegionBytes(reduction::packsOf(s.maxChunkBytes));
    s.packetHalfBytes = s.packetChunkBytes * std::max<uint64_t>(mine.scratchChunks, 1);
    const uint64_t need = 2 * s.packetHalfBytes;
    if (need > resources.packetBytesFree()) {
      s.reason = "its packet region (" + std::to_string(need) + " bytes for max_message_size " +
                 std::to_string(p.maxMessageSize) + ") does not fit the packet buffer's " +
                 std::to_string(resources.packetBytesFree()) + " free bytes";
    } else {
      s.packetOffset = resources.reservePacketRegion(need);
    }
  }
  if (s.needsPeerData) s.slotsOffset = resources.reservePacketRegion(plan::descriptorSlotsBytes(v.nRanks));
  if (s.blocks > resources.topology().smCount && resources.topology().smCount > 0)
    s.reason = std::to_string(s.blocks) + " thread blocks, more than the GPU's multiprocessors";
  if (p.numThreadsPerBlock > reduction::kMaxThreads)
    s.reason = "num_threads_per_block " + std::to_string(p.numThreadsPerBlock) + " exceeds " +
               std::to_string(reduction::kMaxThreads);
}

std::string PlanAlgorithm::unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const {
  const State& s = *state_;
  const plan::Plan& p = source_->plan;
  if (!s.initialized) return "not initialised on this communicator";
  if (!s.reason.empty()) return s.reason;
  if (args.collective != p.collective) return std::string("the plan is a ") + collectiveName(p.collective);
  if (topo.nRanks != p.numRanks) return "the plan is for " + std::to_string(p.numRanks) + " ranks";
  const uint64_t bytes = args.count * unitsOf(p).first * dataTypeSize(args.dtype);
  if (bytes < p.minMessageSize || bytes > p.maxMessageSize)
    return "the plan runs " + std::to_string(p.minMessageSize) + " to " + std::to_string(p.maxMessageSize) +
           " input bytes per rank, not " + std::to_string(bytes);
  if (args.inPlace(topo.rank) != p.inplace)
    return p.inplace ? "the plan runs in place only" : "the plan runs out of place only";
  if (s.reduces && args.op.op != ReduceOp::Sum && args.op.op != ReduceOp::Prod &&
      args.op.op != ReduceOp::Min && args.op.op != ReduceOp::Max)
    return std::string("plans reduce with sum, prod, min or max, not ") + reduceOpName(args.op.op);
  const uint64_t chunk = (args.count + p.chunksPerUnit - 1) / p.chunksPerUnit * dataTypeSize(args.dtype);
  const uint64_t scratch = chunk * p.ranks[topo.rank].scratchChunks;
  if (p.protocol == plan::Protocol::Simple && scratch > s.scratchBytes)
    return "its scratch (" + std::to_string(scratch) + " bytes) exceeds the communicator's " +
           std::to_string(s.scratchBytes) + " (MESHCOMM_SCRATCH_BYTES)";
  return {};
}

LaunchConfig PlanAlgorithm::defaultConfig(const CollectiveArgs&, const CommTopology&) const {
  return LaunchConfig{state_->blocks, source_->plan.numThreadsPerBlock};
}

void PlanAlgorithm::launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
                           void*) {
  State& s = *state_;
  const plan::Plan& p = source_->plan;
  const CommDeviceView& v = resources.view();
  const std::string why = unsupportedReason(args, resources.topology());
  MESHCOMM_REQUIRE(why.empty(), "rank ", v.rank, ": plan ", p.name, ": ", why);
  MESHCOMM_REQUIRE(config.nBlocks == 0 || config.nBlocks == s.blocks, "rank ", v.rank, ": plan ", p.name,
                   ": runs ", s.blocks, " blocks (its thread blocks), not ", config.nBlocks);
  if (args.count == 0) return;
  const auto [inUnits, outUnits] = unitsOf(p);
  const uint32_t elemBytes = static_cast<uint32_t>(dataTypeSize(args.dtype));
  plan::PlanLaunch a{};
  a.view = v;
  a.blocks = static_cast<const plan::BlockRecord*>(s.blocksBuf.data());
  a.ops = static_cast<const plan::OpRecord*>(s.opsBuf.data());
  a.refs = static_cast<const plan::RefRecord*>(s.refsBuf.data());
  a.peerBuffers = static_cast<char* const*>(s.peerBuffers.data());
  a.local[static_cast<int>(BufferKind::Input)] = const_cast<char*>(static_cast<const char*>(args.input));
  a.local[static_cast<int>(BufferKind::Output)] = static_cast<char*>(args.output);
  a.local[static_cast<int>(BufferKind::Scratch)] =
      nullptr;  // bufferOf() takes the own scratch from the table
  a.n = args.count;
  a.chunksPerUnit = p.chunksPerUnit;
  a.chunkElems = (args.count + p.chunksPerUnit - 1) / p.chunksPerUnit;
  a.elemBytes = elemBytes;
  a.packetOffset = s.packetOffset;
  a.packetHalfBytes = s.packetHalfBytes;
  a.packetChunkBytes = s.packetChunkBytes;
  a.epoch = s.epoch;
  a.barriers = s.barriers;
  a.red = makeReduceParams(args.op, v.nRanks);
  if (s.needsPeerData) {
    BufferRegistry& registry = resources.registry();
    const uint64_t inBytes = args.count * inUnits * elemBytes, outBytes = args.count * outUnits * elemBytes;
    const RegisteredSpan in = registry.find(args.input, inBytes), out = registry.find(args.output, outBytes);
    MESHCOMM_REQUIRE(in.registered() && out.registered(), "rank ", v.rank, ": plan ", p.name,
                     ": it writes into or reads from the peers' input or output, so both buffers must lie in "
                     "buffers registered with Comm::registerBuffer (input ",
                     in.registered() ? "registered" : "not registered", ", output ",
                     out.registered() ? "registered" : "not registered", ")");
    plan::PeerBufferExchange x{};
    x.view = v;
    x.registry = registry.deviceView();
    x.mine = plan::CallBufferDescriptor{in.index, out.index, in.offset, out.offset, inBytes, outBytes};
    x.slotsOffset = s.slotsOffset;
    x.epoch = s.prologueEpoch;
    x.peerBuffers = static_cast<char**>(s.peerBuffers.data());
    plan::exchangePeerBuffers(x, args.stream);
  }
  const int threads = config.nThreadsPerBlock > 0 ? config.nThreadsPerBlock : p.numThreadsPerBlock;
  MESHCOMM_REQUIRE(plan::launchPlan(a, s.blocks, threads, args.dtype, args.op.op, args.stream), "rank ",
                   v.rank, ": plan ", p.name, ": no kernel for dtype ", dataTypeName(args.dtype));
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm
