// PlanAlgorithm (include/meshcomm/plan_algorithm.hpp): a loaded plan as an Algorithm. initialize() agrees on
// the plan across ranks and builds this rank's device plan; unsupportedReason() says which calls it cannot
// run; launch() computes the call's chunk geometry and launches the executor (and, for plans that touch the
// peers' call buffers, the prologue that learns them). docs/dsl.md, "The executor".
#include "meshcomm/plan_algorithm.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "collectives/algorithms/reduction_common.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "core/device_trace.hpp"
#include "plan/device_plan.hpp"
#include "plan/plan_facts.hpp"
#include "plan/plan_format.hpp"
#include "plan/plan_peer_buffers.hpp"
#include "plan/plan_port_channels.hpp"

namespace meshcomm {

using plan::BufferKind;
using plan::OpKind;

struct PlanAlgorithm::Source {
  plan::Plan plan;
  uint64_t hash = 0;
};

struct PlanAlgorithm::State {
  bool initialized = false;
  int rank = 0;
  plan::PlanFacts facts;      // the whole plan's needs (alike on every rank)
  int blocks = 0;             // this rank's thread blocks
  uint64_t scratchBytes = 0;  // the communicator's scratch buffer
  GpuBuffer blocksBuf, opsBuf, refsBuf, peerBuffers;
  uint64_t packetOffset = 0, slotsOffset = 0;
  uint64_t* epoch = nullptr;
  uint64_t* prologueDone = nullptr;  // the prologue's block 0 -> other blocks word (PeerBufferExchange::done)
  uint64_t* barriers = nullptr;
  // Owned by the communicator's resources (sharedState), so the proxy stops before the communicator's
  // connections and tokens go, even when this algorithm object outlives the Comm.
  const plan::PortChannels* ports = nullptr;
  std::unique_ptr<DeviceTraceBuffer> trace;  // MESHCOMM_TRACE: the executor's events (docs/trace.md)

  bool needsPrologue() const { return facts.reachesPeerBuffers || facts.writesPeerScratch; }
};

std::shared_ptr<PlanAlgorithm> PlanAlgorithm::fromJson(const std::string& text) {
  auto source = std::make_shared<Source>();
  source->plan = plan::parsePlan(text, &source->hash);
  return std::make_shared<PlanAlgorithm>(source);
}

std::shared_ptr<PlanAlgorithm> PlanAlgorithm::load(const std::string& path) {
  auto source = std::make_shared<Source>();
  source->plan = plan::loadPlan(path, &source->hash);
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
uint64_t PlanAlgorithm::hash() const {
  return source_->hash;
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
  s.trace = DeviceTraceBuffer::fromEnvironment("plan-" + p.name, v.rank, plan::detail::traceEventNames());
  s.epoch = resources.allocateDeviceWords(reduction::kLLEpochWords);
  s.prologueDone = resources.allocateDeviceWords(1);
  s.initialized = true;
  if (p.numRanks != v.nRanks) {
    s.facts.reason = "the plan is for " + std::to_string(p.numRanks) + " ranks";
    return;
  }
  s.facts = plan::analyzePlan(p, v.channelsPerPeer, resources.topology().smCount, reduction::kMaxThreads);
  const plan::RankPlan& mine = p.ranks[v.rank];
  s.blocks = static_cast<int>(mine.threadblocks.size());

  // Flatten this rank's thread blocks.
  std::vector<plan::BlockRecord> blocks;
  std::vector<plan::OpRecord> ops;
  std::vector<plan::RefRecord> refs;
  std::map<std::pair<std::vector<int>, int>, uint32_t> barrierIds;  // (members, occurrence) -> counter
  auto addRef = [&](const plan::ChunkRef& c) {
    refs.push_back(plan::RefRecord{c.index, static_cast<uint32_t>(c.size), static_cast<uint8_t>(c.buffer)});
  };
  for (const auto& tb : mine.threadblocks) {
    blocks.push_back(plan::BlockRecord{static_cast<uint32_t>(ops.size()),
                                       static_cast<uint32_t>(tb.ops.size()),
                                       static_cast<uint32_t>(refs.size()), 0});
    std::map<std::vector<int>, int> seen;
    for (const auto& op : tb.ops) {
      plan::OpRecord d{};
      d.kind = static_cast<uint8_t>(op.kind);
      d.relaxed = op.relaxed ? 1 : 0;
      d.peer = -1;
      d.channel = -1;
      d.firstRef = static_cast<uint32_t>(refs.size());
      if (op.channel >= 0) {  // analyzePlan declined plans whose memory channels the grid lacks
        const plan::Channel& ch = mine.channels[op.channel];
        d.peer = ch.peer;
        if (ch.type == plan::ChannelType::Port) {
          d.port = 1;
          d.channel = op.channel;
        } else {
          d.channel = ch.index < v.channelsPerPeer ? ch.peer * v.channelsPerPeer + ch.index : -1;
        }
      }
      switch (op.kind) {
        case OpKind::Copy:
        case OpKind::Put:
        case OpKind::Get:
        case OpKind::PutPackets:
        case OpKind::UnpackPackets:
          addRef(op.dst);
          addRef(op.src);
          break;
        case OpKind::Reduce:
        case OpKind::ReducePackets:
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
    blocks.back().numRefs = static_cast<uint32_t>(refs.size()) - blocks.back().firstRef;
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

  // The same reservations on every rank (the facts are the whole plan's), so the offsets agree.
  if (p.protocol == plan::Protocol::LL && s.facts.reason.empty()) {
    if (s.facts.packetRegionBytes > resources.packetBytesFree()) {
      s.facts.reason = "its packet region (" + std::to_string(s.facts.packetRegionBytes) +
                       " bytes for max_message_size " + std::to_string(p.maxMessageSize) +
                       ") does not fit the packet buffer's " + std::to_string(resources.packetBytesFree()) +
                       " free bytes";
    } else {
      s.packetOffset = resources.reservePacketRegion(s.facts.packetRegionBytes);
    }
  }
  if (s.needsPrologue() && plan::descriptorSlotsBytes(v.nRanks) <= resources.packetBytesFree())
    s.slotsOffset = resources.reservePacketRegion(plan::descriptorSlotsBytes(v.nRanks));
  else if (s.needsPrologue())
    s.facts.reason = "no room for its descriptor slots in the packet buffer";

  // Port channels last: the facts (and so whether to build them) are alike on every rank.
  if (s.facts.portChannels && s.facts.reason.empty()) {
    auto ports = std::make_shared<plan::PortChannels>(resources, mine);
    s.ports = ports.get();
    resources.sharedState("plan port channels " + std::to_string(reinterpret_cast<uintptr_t>(this))) =
        std::move(ports);
  }
}

std::string PlanAlgorithm::unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const {
  const State& s = *state_;
  const plan::Plan& p = source_->plan;
  if (!s.initialized) return "not initialised on this communicator";
  if (!s.facts.reason.empty()) return s.facts.reason;
  if (args.collective != p.collective) return std::string("the plan is a ") + collectiveName(p.collective);
  if (topo.nRanks != p.numRanks) return "the plan is for " + std::to_string(p.numRanks) + " ranks";
  const uint64_t elem = dataTypeSize(args.dtype);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(args.count), plan::collectiveUnits(p).first * elem,
                             &bytes))
    return "the call's size overflows";
  if (bytes < p.minMessageSize || bytes > p.maxMessageSize)
    return "the plan runs " + std::to_string(p.minMessageSize) + " to " + std::to_string(p.maxMessageSize) +
           " input bytes per rank, not " + std::to_string(bytes);
  if (args.inPlace(topo.rank) != p.inplace)
    return p.inplace ? "the plan runs in place only" : "the plan runs out of place only";
  const ReduceOp op = args.op.op;
  if (s.facts.reduces && op != ReduceOp::Sum && op != ReduceOp::Prod && op != ReduceOp::Min &&
      op != ReduceOp::Max)
    return std::string("plans reduce with sum, prod, min or max, not ") + reduceOpName(op);
  const uint64_t chunk = plan::chunkElems(p, args.count, elem) * elem;
  uint64_t scratch = 0;
  if (p.protocol == plan::Protocol::Simple &&
      (__builtin_mul_overflow(chunk, s.facts.maxScratchChunks, &scratch) || scratch > s.scratchBytes))
    return "its scratch (" + std::to_string(chunk) + " bytes x " + std::to_string(s.facts.maxScratchChunks) +
           " chunks) exceeds the communicator's " + std::to_string(s.scratchBytes) +
           " (MESHCOMM_SCRATCH_BYTES)";
  if (p.protocol == plan::Protocol::LL && chunk + 16 > s.facts.packetChunkBytes / 2)
    return "its chunks exceed the packet region sized for max_message_size";
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
  // Everything a rank can refuse alone is checked before anything is enqueued (the peers would wait).
  const std::string why = unsupportedReason(args, resources.topology());
  MESHCOMM_REQUIRE(why.empty(), "rank ", v.rank, ": plan ", p.name, ": ", why);
  MESHCOMM_REQUIRE(config.nBlocks == 0 || config.nBlocks == s.blocks, "rank ", v.rank, ": plan ", p.name,
                   ": runs ", s.blocks, " blocks (its thread blocks), not ", config.nBlocks);
  const int threads = config.nThreadsPerBlock > 0 ? config.nThreadsPerBlock : p.numThreadsPerBlock;
  MESHCOMM_REQUIRE(threads % 32 == 0 && threads >= 32 && threads <= reduction::kMaxThreads, "rank ", v.rank,
                   ": plan ", p.name, ": nthreads_per_block ", threads, ": a multiple of 32 from 32 to ",
                   reduction::kMaxThreads);
  if (args.count == 0) return;
  const auto [inUnits, outUnits] = plan::collectiveUnits(p);
  const uint32_t elemBytes = static_cast<uint32_t>(dataTypeSize(args.dtype));
  plan::PlanLaunch a{};
  a.view = v;
  a.blocks = static_cast<const plan::BlockRecord*>(s.blocksBuf.data());
  a.ops = static_cast<const plan::OpRecord*>(s.opsBuf.data());
  a.refs = static_cast<const plan::RefRecord*>(s.refsBuf.data());
  a.peerBuffers = static_cast<char* const*>(s.peerBuffers.data());
  if (s.ports != nullptr) {
    s.ports->checkError();
    a.ports = s.ports->deviceHandles();
  }
  a.local[static_cast<int>(BufferKind::Input)] = const_cast<char*>(static_cast<const char*>(args.input));
  a.local[static_cast<int>(BufferKind::Output)] = static_cast<char*>(args.output);
  a.local[static_cast<int>(BufferKind::Scratch)] =
      nullptr;  // bufferOf() takes the own scratch from the table
  a.n = args.count;
  a.chunksPerUnit = p.chunksPerUnit;
  a.chunkElems = plan::chunkElems(p, args.count, elemBytes);
  a.elemBytes = elemBytes;
  a.packetOffset = s.packetOffset;
  a.packetHalfBytes = s.facts.packetRegionBytes / 2;
  a.packetChunkBytes = s.facts.packetChunkBytes;
  a.epoch = s.epoch;
  a.barriers = s.barriers;
  // A plan without reductions moves bytes only: its one-operand packet reads run as sums.
  ReduceOpSpec op = s.facts.reduces ? args.op : ReduceOpSpec(ReduceOp::Sum);
  a.red = makeReduceParams(op, v.nRanks);
  if (s.trace) a.trace = s.trace->view();
  // Every rank runs the prologue (in the executor kernel): an entry barrier with every peer (the peers'
  // previous use of their scratch is over) and, for plans that reach the peers' call buffers, the exchange of
  // where they lie.
  plan::PeerBufferExchange& x = a.prologue;
  x.run = s.needsPrologue();
  x.exchange = s.facts.reachesPeerBuffers;
  x.slotsOffset = s.slotsOffset;
  x.peerBuffers = static_cast<char**>(s.peerBuffers.data());
  x.done = s.prologueDone;
  x.mine = plan::CallBufferDescriptor{-1, -1, 0, 0, 0, 0};
  bool registered = true;
  RegisteredSpan in, out;
  if (x.run && x.exchange) {
    BufferRegistry& registry = resources.registry();
    const uint64_t inBytes = args.count * inUnits * elemBytes, outBytes = args.count * outUnits * elemBytes;
    in = registry.find(args.input, inBytes);
    out = registry.find(args.output, outBytes);
    registered = in.registered() && out.registered();
    x.registry = registry.deviceView();
    // Unregistered: the descriptor names no registration, so the peers fail this call too (in step).
    if (registered)
      x.mine = plan::CallBufferDescriptor{in.index, out.index, in.offset, out.offset, inBytes, outBytes};
    x.mine.inBytes = inBytes;
    x.mine.outBytes = outBytes;
  }
  MESHCOMM_REQUIRE(plan::launchPlan(a, s.blocks, threads, args.dtype, op.op, args.stream), "rank ", v.rank,
                   ": plan ", p.name, ": no kernel for dtype ", dataTypeName(args.dtype));
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
  MESHCOMM_REQUIRE(registered, "rank ", v.rank, ": plan ", p.name,
                   ": it writes into or reads from the peers' input or output, so both buffers must lie in "
                   "buffers registered with Comm::registerBuffer (input ",
                   in.registered() ? "registered" : "not registered", ", output ",
                   out.registered() ? "registered" : "not registered", ")");
}

}  // namespace meshcomm
