// Comm: validation, selection, per-buffer contexts and launch of every collective (docs/collectives.md).
// Not thread-safe: one host thread drives a Comm at a time (like an NCCL communicator).
#include "meshcomm/comm.hpp"

#include <cuda_runtime.h>

#include <optional>
#include <unordered_map>

#include "base/error_message.hpp"
#include "base/logging.hpp"
#include "collectives/default_table.hpp"
#include "collectives/p2p_phases.hpp"
#include "collectives/selection_plan.hpp"
#include "collectives/rank_agreement.hpp"
#include "plan/plan_directory.hpp"
#include "collectives/validation.hpp"
#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/builtin_algorithms.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm {

namespace {

// Makes `device` current for a call only when it is not already (the common case costs one query).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) guard_.emplace(device);
  }

 private:
  std::optional<CudaDeviceGuard> guard_;
};

bool isCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MESHCOMM_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

Selector loadSelector() {
  if (auto path = envRaw("MESHCOMM_ALGO_TABLE")) return Selector::fromFile(*path);
  return Selector::fromJson(defaultSelectionTable());
}

// A non-zero field of the selection (rule or caller) wins over the algorithm's default.
LaunchConfig mergeConfig(const LaunchConfig& chosen, const LaunchConfig& defaults) {
  LaunchConfig c = defaults;
  if (chosen.nBlocks > 0) c.nBlocks = chosen.nBlocks;
  if (chosen.nThreadsPerBlock > 0) c.nThreadsPerBlock = chosen.nThreadsPerBlock;
  return c;
}

// Per-algorithm contexts keyed by the algorithm's contextKey (unbounded for now).
class ContextCache {
 public:
  void* get(CommResources& resources, Algorithm& algorithm, const CollectiveArgs& args, const char* op,
            int rank) {
    const std::string key = algorithm.contextKey(args);
    if (key.empty()) return nullptr;
    auto& perAlgorithm = contexts_[&algorithm];
    auto it = perAlgorithm.find(key);
    if (it != perAlgorithm.end()) return it->second.get();
    MESHCOMM_REQUIRE(!args.capturing, "rank ", rank, ": ", op, ": algorithm ", algorithm.name(),
                     " needs a context for these buffers: warm up before capture");
    std::shared_ptr<void> context = algorithm.buildContext(resources, args);
    return perAlgorithm.emplace(key, std::move(context)).first->second.get();
  }
  void clear() { contexts_.clear(); }

 private:
  std::unordered_map<const Algorithm*, std::unordered_map<std::string, std::shared_ptr<void>>> contexts_;
};

}  // namespace

class Comm::Impl {
 public:
  Impl(std::shared_ptr<Bootstrap> bootstrap, const CommConfig& config);
  ~Impl();

  ValidationContext validation() const { return {topo().rank, topo().nRanks, device, pointerQuery}; }
  const CommTopology& topo() const { return resources->topology(); }
  void rebuildPlan() {
    plan = SelectionPlan(selector, algorithms, forced);
    planDirty = false;
  }
  const SelectionPlan& currentPlan() {
    if (planDirty) rebuildPlan();
    return plan;
  }
  void initialize(Algorithm& algorithm);

  // The part after validation (launch, run, and groupEnd on operations validated one by one): closing →
  // device error → capture → select → context → launch.
  void launchSelected(const char* op, CollectiveArgs& args, const Selection* forcedSelection);
  // Where the call's buffers lie in registered buffers (allreduce; a host lookup, no synchronisation).
  void findSpans(CollectiveArgs& args) const;

  // One validated send or receive (count in elements of dtype): alone, or into the open group.
  void sendOrRecv(const P2POp& p2p, DataType dtype, cudaStream_t stream);
  void addP2P(const P2POp& p2p, DataType dtype, cudaStream_t stream);
  void flushGroup();

  std::unique_ptr<Communicator> communicator;
  int device = -1;
  std::unique_ptr<CommResources> resources;
  AlgorithmCollection algorithms;
  Selector selector;
  ForcedAlgorithms forced;
  SelectionPlan plan;
  bool planDirty = false;  // selector() handed out a mutable reference: rebuild before the next selection
  ContextCache contexts;
  CudaPointerQuery pointerQuery;
  // send/recv group
  int groupDepth = 0;
  std::vector<P2POp> groupOps;
  bool aborted = false;  // abort(): the teardown skips the agreement with the peers
  bool closing = false;  // beginClose(): drained and announced; no launches any more
  void beginClose();
  void awaitPeersClosed();
  cudaStream_t groupStream = nullptr;
};

Comm::Impl::Impl(std::shared_ptr<Bootstrap> bootstrap, const CommConfig& config)
    : communicator(std::make_unique<Communicator>(std::move(bootstrap), config.cudaDevice)),
      device(communicator->cudaDevice()) {
  CudaDeviceGuard guard(device);
  resources = std::make_unique<CommResources>(*communicator, config.resources);
  algorithms = builtinAlgorithms();
  for (auto& plan : plan::loadAgreedPlanDirectory(communicator->bootstrap())) {
    try {
      algorithms.add(std::move(plan));
    } catch (const Error& e) {
      throw Error(e.code(), detail::concat("rank ", topo().rank,
                                           ": creating the Comm: MESHCOMM_PLAN_DIR: ", messageOf(e)));
    }
  }
  for (const auto& a : algorithms.all()) initialize(*a);
  selector = loadAgreedSelector(communicator->bootstrap(), loadSelector);
  forced = forcedAlgorithmsFromEnv();
  try {
    rebuildPlan();
  } catch (const Error& e) {
    throw Error(e.code(), detail::concat("rank ", topo().rank, ": creating the Comm: ", messageOf(e)));
  }
  groupOps.reserve(2 * static_cast<size_t>(topo().nRanks));
}

namespace {
// The teardown agreement's bootstrap tag (collective layer range, as CommResources' and BufferRegistry's).
constexpr int kCloseTag = 0x3c00000 + 32;
}  // namespace

void Comm::Impl::beginClose() {
  if (closing) return;
  closing = true;
  CudaDeviceGuard guard(device);
  const cudaError_t err = cudaDeviceSynchronize();  // every stream, known to us or not
  if (err != cudaSuccess)
    MESHCOMM_LOG(WARN, "rank ", topo().rank,
                 ": closing the Comm: cudaDeviceSynchronize: ", cudaGetErrorString(err));
  if (aborted) return;
  const char done = 1;
  for (int peer = 0; peer < topo().nRanks; ++peer) {
    if (peer != topo().rank) communicator->bootstrap().send(&done, 1, peer, kCloseTag);
  }
}

void Comm::Impl::awaitPeersClosed() {
  if (aborted) return;
  for (int peer = 0; peer < topo().nRanks; ++peer) {
    char done = 0;
    if (peer != topo().rank) communicator->bootstrap().recv(&done, 1, peer, kCloseTag);
  }
}

Comm::Impl::~Impl() {
  // Drain every stream (unknown to us) and agree with the peers that nobody uses the shared buffers any more
  // (beginClose + awaitPeersClosed: a barrier in two halves), then release contexts, algorithms, resources
  // and the communicator in that order. Never throws.
  try {
    beginClose();
    awaitPeersClosed();
  } catch (const std::exception& e) {
    MESHCOMM_LOG(WARN, "~Comm: ", e.what(), " (continuing the teardown)");
  }
  try {
    contexts.clear();
    plan = SelectionPlan();
    algorithms = AlgorithmCollection();
    resources.reset();
    communicator.reset();
  } catch (const std::exception& e) {
    MESHCOMM_LOG(ERROR, "~Comm: teardown failed: ", e.what());
  }
}

void Comm::Impl::initialize(Algorithm& algorithm) {
  try {
    algorithm.initialize(*resources);
  } catch (const Error& e) {
    throw Error(e.code(), detail::concat("rank ", topo().rank, ": initializing algorithm ", algorithm.name(),
                                         ": ", messageOf(e)));
  }
}

void Comm::Impl::findSpans(CollectiveArgs& args) const {
  args.inputSpan = args.outputSpan = RegisteredSpan{};  // set by Comm only (CollectiveArgs)
  const BufferRegistry& registry = resources->registry();
  if (registry.count() == 0 || args.collective != Collective::AllReduce) return;
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  args.inputSpan = registry.find(args.input, bytes);
  args.outputSpan = registry.find(args.output, bytes);
}

void Comm::Impl::launchSelected(const char* op, CollectiveArgs& args, const Selection* forcedSelection) {
  MESHCOMM_REQUIRE(!closing, "rank ", topo().rank, ": ", op, ": the Comm is closing (beginClose was called)");
  DeviceScope scope(device);
  communicator->checkDeviceError();
  args.capturing = isCapturing(args.stream);
  const Selection selection = forcedSelection ? *forcedSelection : currentPlan().select(args, topo());
  Algorithm& algorithm = *selection.algorithm;
  void* context = contexts.get(*resources, algorithm, args, op, topo().rank);
  const LaunchConfig config = mergeConfig(selection.config, algorithm.defaultConfig(args, topo()));
  algorithm.launch(*resources, args, config, context);
}

void Comm::Impl::sendOrRecv(const P2POp& p2p, DataType dtype, cudaStream_t stream) {
  groupDepth++;
  try {
    addP2P(p2p, dtype, stream);
  } catch (...) {
    groupDepth--;
    if (groupDepth == 0) groupOps.clear();
    throw;
  }
  if (--groupDepth == 0) flushGroup();
}

void Comm::Impl::addP2P(const P2POp& p2p, DataType dtype, cudaStream_t stream) {
  if (p2p.count == 0) return;
  if (groupOps.empty()) {
    groupStream = stream;
  } else if (stream != groupStream) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", topo().rank, ": ",
                   p2p.kind == P2POp::Send ? "send" : "recv",
                   ": stream: differs from the stream of "
                   "the group's first operation (every operation of a group must use the same stream)");
  }
  // Groups may mix dtypes: the SendRecv collective carries bytes (dtype uint8).
  groupOps.push_back(P2POp{p2p.kind, p2p.peer, p2p.buffer, p2p.count * dataTypeSize(dtype)});
}

// One SendRecv launch per phase (p2p_phases.hpp: one unless a send reads what a receive before it writes).
void Comm::Impl::flushGroup() {
  if (groupOps.empty()) return;
  CollectiveArgs args;
  args.collective = Collective::SendRecv;
  args.dtype = DataType::U8;
  args.stream = groupStream;
  const std::vector<size_t> boundaries = p2pPhaseBoundaries(groupOps.data(), groupOps.size(), topo().nRanks);
  try {
    for (size_t i = 0, begin = 0; i <= boundaries.size(); ++i) {
      const size_t end = i < boundaries.size() ? boundaries[i] : groupOps.size();
      args.p2pOps = groupOps.data() + begin;
      args.numP2POps = end - begin;
      launchSelected("sendrecv", args, nullptr);
      begin = end;
    }
  } catch (...) {
    groupOps.clear();
    throw;
  }
  groupOps.clear();
}

// ---- Comm --------------------------------------------------------------------------------------------

Comm::Comm(std::shared_ptr<Bootstrap> bootstrap, const CommConfig& config)
    : impl_(std::make_unique<Impl>(std::move(bootstrap), config)) {}

std::unique_ptr<Comm> Comm::fromEnvironment(CommConfig config) {
  if (config.cudaDevice < 0) config.cudaDevice = RankEnv::fromEnvironment().localRank;
  const int gpus = gpuCount();
  MESHCOMM_REQUIRE(config.cudaDevice < gpus, "Comm::fromEnvironment: device ", config.cudaDevice,
                   " (LOCAL_RANK unless configured) but this host has ", gpus, " GPU(s)");
  MESHCOMM_CUDA_CHECK(cudaSetDevice(config.cudaDevice));
  return std::make_unique<Comm>(TcpBootstrap::fromEnvironment(), config);
}

Comm::~Comm() = default;

void Comm::abort() {
  impl_->aborted = true;
  impl_->communicator->abortDeviceWaits();
}

void Comm::beginClose() {
  impl_->beginClose();
}

int Comm::rank() const {
  return impl_->topo().rank;
}
int Comm::size() const {
  return impl_->topo().nRanks;
}
int Comm::cudaDevice() const {
  return impl_->device;
}
Communicator& Comm::communicator() const {
  return *impl_->communicator;
}
CommResources& Comm::resources() const {
  return *impl_->resources;
}

void Comm::allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOpSpec op,
                     cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::AllReduce, send, recv, count, dtype, stream, op));
}

void Comm::allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::AllGather, send, recv, sendCount, dtype, stream));
}

void Comm::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOpSpec op,
                         cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::ReduceScatter, send, recv, recvCount, dtype, stream, op));
}

void Comm::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                     cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::Broadcast, send, recv, count, dtype, stream, {}, root));
}

void Comm::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOpSpec op, int root,
                  cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::Reduce, send, recv, count, dtype, stream, op, root));
}

void Comm::gather(const void* send, void* recv, size_t sendCount, DataType dtype, int root,
                  cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::Gather, send, recv, sendCount, dtype, stream, {}, root));
}

void Comm::scatter(const void* send, void* recv, size_t recvCount, DataType dtype, int root,
                   cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::Scatter, send, recv, recvCount, dtype, stream, {}, root));
}

void Comm::allToAll(const void* send, void* recv, size_t countPerPeer, DataType dtype, cudaStream_t stream) {
  launch(CollectiveArgs::of(Collective::AllToAll, send, recv, countPerPeer, dtype, stream));
}

void Comm::allToAllv(const void* send, const size_t* sendCounts, const size_t* sendDispls, void* recv,
                     const size_t* recvCounts, const size_t* recvDispls, DataType dtype, cudaStream_t stream,
                     CountsLocation where) {
  CollectiveArgs a = CollectiveArgs::of(Collective::AllToAllv, send, recv, 0, dtype, stream);
  a.sendCounts = sendCounts, a.sendDispls = sendDispls, a.recvCounts = recvCounts, a.recvDispls = recvDispls;
  a.countsLocation = where;
  launch(a);
}

void Comm::send(const void* buffer, size_t count, DataType dtype, int peer, cudaStream_t stream) {
  launch(checkP2P(P2POp{P2POp::Send, peer, const_cast<void*>(buffer), count}, dtype, stream));
}

void Comm::recv(void* buffer, size_t count, DataType dtype, int peer, cudaStream_t stream) {
  launch(checkP2P(P2POp{P2POp::Recv, peer, buffer, count}, dtype, stream));
}

void Comm::groupStart() {
  impl_->groupDepth++;
}

void Comm::groupEnd() {
  MESHCOMM_REQUIRE(impl_->groupDepth > 0, "rank ", rank(), ": groupEnd: no matching groupStart");
  if (--impl_->groupDepth == 0) impl_->flushGroup();
}

void Comm::barrier(cudaStream_t stream) {
  CollectiveArgs a;
  a.collective = Collective::Barrier;
  a.dtype = DataType::U8;
  a.stream = stream;
  launch(a);
}

void Comm::launch(const CollectiveArgs& args) {
  launch(check(args));
}

CheckedCall Comm::check(const CollectiveArgs& args) const {
  MESHCOMM_REQUIRE(args.collective != Collective::SendRecv, "rank ", rank(),
                   ": sendrecv: collective: point-to-point operations run through send/recv (checkP2P)");
  validateCollective(impl_->validation(), collectiveName(args.collective), args);
  return CheckedCall(this, args, P2POp{});
}

CheckedCall Comm::checkP2P(const P2POp& p2p, DataType dtype, cudaStream_t stream) const {
  validateP2P(impl_->validation(), p2p.kind == P2POp::Send ? "send" : "recv", p2p.buffer, p2p.count, dtype,
              p2p.peer);
  CollectiveArgs a;
  a.collective = Collective::SendRecv;
  a.dtype = dtype;
  a.stream = stream;
  return CheckedCall(this, a, p2p);
}

void Comm::launch(const CheckedCall& call) {
  const char* op = collectiveName(call.args_.collective);
  MESHCOMM_REQUIRE(call.comm_ == this, "rank ", rank(), ": ", op, ": the call was checked by another Comm");
  if (call.isP2P()) return impl_->sendOrRecv(call.p2p_, call.args_.dtype, call.args_.stream);
  CollectiveArgs a = call.args_;
  if (isNoOp(a)) return;
  impl_->findSpans(a);
  impl_->launchSelected(op, a, nullptr);
}

void Comm::checkError() const {
  impl_->communicator->checkDeviceError();
}

AlgorithmCollection& Comm::algorithms() {
  return impl_->algorithms;
}

// Set up before it becomes selectable: a failed initialize (e.g. during a CUDA graph capture, where device
// allocation is not allowed) leaves the collection as it was, and the call can be repeated.
void Comm::addAlgorithm(std::shared_ptr<Algorithm> algorithm) {
  impl_->algorithms.checkAddable(algorithm.get());
  impl_->initialize(*algorithm);
  impl_->algorithms.add(std::move(algorithm));
  impl_->rebuildPlan();
}

Selector& Comm::selector() {
  impl_->planDirty = true;
  return impl_->selector;
}

// The plan is built before the table replaces the current one, so a table naming an unknown algorithm
// leaves the Comm as it was.
void Comm::setSelector(Selector selector) {
  SelectionPlan plan(selector, impl_->algorithms, impl_->forced);
  impl_->selector = std::move(selector);
  impl_->plan = std::move(plan);
  impl_->planDirty = false;
}

Selection Comm::select(const CollectiveArgs& args) const {
  CollectiveArgs a = args;
  impl_->findSpans(a);
  return impl_->currentPlan().select(a, impl_->topo());
}

BufferRegistration Comm::registerBuffer(void* buffer, size_t bytes) {
  DeviceScope scope(impl_->device);
  const char* problem =
      buffer == nullptr ? "is null" : bufferProblem(impl_->pointerQuery.query(buffer), impl_->device);
  MESHCOMM_REQUIRE(problem == nullptr, "rank ", rank(), ": registerBuffer: buffer: ", problem);
  return impl_->resources->registry().add(buffer, bytes);
}

void Comm::deregisterBuffer(BufferRegistration registration) {
  DeviceScope scope(impl_->device);
  impl_->resources->registry().remove(registration);
}

void Comm::run(const CollectiveArgs& args, const std::string& algorithm, LaunchConfig config) {
  const char* op = collectiveName(args.collective);
  CollectiveArgs a = args;
  validateCollective(impl_->validation(), op, a);
  if (isNoOp(a)) return;
  impl_->findSpans(a);
  std::shared_ptr<Algorithm> chosen = impl_->algorithms.find(algorithm);
  MESHCOMM_REQUIRE(chosen != nullptr && chosen->collective() == a.collective, "rank ", rank(), ": ", op,
                   ": algorithm '", algorithm, "' is not a registered ", op, " algorithm");
  a.capturing = isCapturing(a.stream);
  const std::string reason = chosen->unsupportedReason(a, impl_->topo());
  MESHCOMM_REQUIRE(reason.empty(), "rank ", rank(), ": ", op, ": algorithm ", algorithm,
                   " cannot run this call: ", reason);
  const Selection selection{chosen, config};
  impl_->launchSelected(op, a, &selection);
}

}  // namespace meshcomm
