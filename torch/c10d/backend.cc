// MeshcommBackend: construction, lifetime, split, coalescing and the common enqueue path (see backend.hpp).
#include "backend.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <string>

#include "checks.hpp"
#include "meshcomm/env.hpp"
#include "op_stream.hpp"

namespace meshcomm::torch_backend {

namespace {

constexpr const char* kUniqueIdKey = "meshcomm/unique_id";

at::Device currentCudaDevice(int rank) {
  TORCH_CHECK(c10::cuda::device_count() > 0, "meshcomm: rank ", rank,
              ": init: no CUDA device is visible (the meshcomm backend runs CUDA tensors only)");
  return at::Device(at::kCUDA, c10::cuda::current_device());
}

}  // namespace

MeshcommBackend::MeshcommBackend(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                                 c10::intrusive_ptr<MeshcommOptions> options)
    : ::c10d::Backend(rank, size),
      state_(std::make_shared<CommState>(rank, size, currentCudaDevice(rank))),
      options_(std::move(options)),
      internalStream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, state_->device.index())) {
  c10::cuda::CUDAGuard guard(state_->device);
  const AsyncErrorHandling errorHandling =
      asyncErrorHandlingFromEnv();  // a bad value fails before the bootstrap
  const std::chrono::milliseconds watchdogInterval(
      translateErrors([] { return envInt("MESHCOMM_TORCH_WATCHDOG_INTERVAL_MS"); }));
  state_->comm = createComm(store, kUniqueIdKey, rank, size, state_->device,
                            {options_->scratchBytes, options_->packetBytes, options_->channelsPerPeer});
  watchdog_ = std::make_unique<Watchdog>(
      state_, *state_->comm, errorHandling,
      "MESHCOMM_TORCH_ASYNC_ERROR_HANDLING=" + std::to_string(static_cast<int>(errorHandling)),
      watchdogInterval);
  init();
}

MeshcommBackend::~MeshcommBackend() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    TORCH_WARN("meshcomm: rank ", getRank(), ": process group teardown: ", e.what());
  }
}

c10::intrusive_ptr<::c10d::Backend::Options> MeshcommBackend::getBackendOptions() {
  // A copy: ProcessGroup::splitGroup writes the child's name and timeout into what it gets.
  return c10::make_intrusive<MeshcommOptions>(*options_);
}

void MeshcommBackend::setTimeout(std::chrono::milliseconds timeout) {
  options_->timeout = timeout;
}

void MeshcommBackend::eagerConnectSingleDevice(at::Device device) {
  // The Comm is connected at construction; only say when the bound device is not the group's.
  if (device.is_cuda() && device.has_index() && device != state_->device) {
    TORCH_WARN("meshcomm: rank ", getRank(), ": process group bound to ", device, " but its Comm is on ",
               state_->device, " (the current device when the group was created)");
  }
}

::c10d::ErrorType MeshcommBackend::getError() {
  if (state_->failed()) {
    return state_->failureIsTimeout() ? ::c10d::ErrorType::TIMEOUT : ::c10d::ErrorType::COMM_ERROR;
  }
  try {
    state_->checkDeviceError();
  } catch (const std::exception&) {
    return ::c10d::ErrorType::COMM_ERROR;
  }
  return ::c10d::ErrorType::SUCCESS;
}

void MeshcommBackend::abort() {
  // No lock: abort must reach a Comm whose owner thread is stuck; it only flips device-visible flags.
  if (state_->comm) state_->comm->abort();
  shutdown();
}

void MeshcommBackend::shutdown() {
  if (watchdog_) watchdog_->stop();  // it watches the Comm that is about to close
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->comm) return;
  c10::cuda::CUDAGuard guard(state_->device);
  // Drains the device and tells the peers; the wait for theirs happens when the state is freed (see
  // CommState::closing), so every rank can shut its groups down in any order.
  state_->closing = std::move(state_->comm);
  try {
    state_->closing->beginClose();
  } catch (const std::exception& e) {  // a peer already gone: its own teardown does not need our word
    TORCH_WARN("meshcomm: rank ", getRank(), ": shutdown: ", e.what());
  }
}

namespace {

// The store a split child bootstraps on. torch hands split() a PrefixStore named after the child group, but
// dist.split_group derives that name from how many groups the calling rank knows, which differs between ranks
// that were members of different earlier groups (new_group registers a group on its members only): the
// members would wait under different keys. So the child's keys live under the parent's own store, named by
// the parent-wide split count and the member ranks, which every member agrees on.
c10::intrusive_ptr<::c10d::Store> splitStore(const c10::intrusive_ptr<::c10d::Store>& given,
                                             uint64_t splitIndex, const std::vector<int>& ranks) {
  c10::intrusive_ptr<::c10d::Store> parent = given;
  if (auto prefixed = c10::dynamic_intrusive_pointer_cast<::c10d::PrefixStore>(given)) {
    parent = prefixed->getUnderlyingStore();
  }
  std::string name = "meshcomm-split/" + std::to_string(splitIndex);
  for (int r : ranks) name += "_" + std::to_string(r);
  return c10::make_intrusive<::c10d::PrefixStore>(name, parent);
}

}  // namespace

c10::intrusive_ptr<::c10d::Backend> MeshcommBackend::split(const c10::intrusive_ptr<::c10d::Store>& store,
                                                           const std::vector<int>& ranks,
                                                           const c10::intrusive_ptr<Options>& opts) {
  // Every parent member calls split, in the same order: the count names this split on all of them.
  const uint64_t splitIndex = splitCount_++;
  const auto self = std::find(ranks.begin(), ranks.end(), getRank());
  if (self == ranks.end()) return nullptr;  // not a member: nothing to build (members bootstrap alone)
  auto childOptions = c10::make_intrusive<MeshcommOptions>(*options_);
  if (auto given = c10::dynamic_intrusive_pointer_cast<MeshcommOptions>(opts)) {
    childOptions = c10::make_intrusive<MeshcommOptions>(*given);
  } else if (opts) {
    childOptions->timeout = opts->timeout;
    childOptions->group_name = opts->group_name;
    childOptions->group_desc = opts->group_desc;
  }
  const std::vector<uint64_t>& parentGlobal = options_->global_ranks_in_group;
  childOptions->global_ranks_in_group.clear();
  for (int r : ranks) {
    childOptions->global_ranks_in_group.push_back(parentGlobal.empty() ? r : parentGlobal.at(r));
  }
  c10::cuda::CUDAGuard guard(state_->device);  // the child lives on the parent's device
  return c10::make_intrusive<MeshcommBackend>(splitStore(store, splitIndex, ranks),
                                              static_cast<int>(self - ranks.begin()),
                                              static_cast<int>(ranks.size()), childOptions);
}

void MeshcommBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  TORCH_CHECK(state_->comm, "meshcomm: rank ", getRank(), ": startCoalescing: process group was shut down");
  TORCH_CHECK(!coalescing_, "meshcomm: rank ", getRank(), ": startCoalescing: a coalescing block is open");
  state_->throwIfFailed("startCoalescing");
  coalescing_ = true;
  coalescedEnd_ = std::make_shared<WorkEnd>(internalStream_);
  coalescedOutputs_.clear();
  state_->comm->groupStart();
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::endCoalescing() {
  c10::cuda::CUDAGuard deviceGuard(state_->device);
  std::lock_guard<std::mutex> lock(state_->mutex);
  TORCH_CHECK(coalescing_, "meshcomm: rank ", getRank(), ": endCoalescing: no coalescing block is open");
  coalescing_ = false;
  std::shared_ptr<WorkEnd> end = std::move(coalescedEnd_);
  std::vector<at::Tensor> outputs = std::move(coalescedOutputs_);
  coalescedOutputs_.clear();
  TORCH_CHECK(state_->comm, "meshcomm: rank ", getRank(), ": endCoalescing: process group was shut down");
  {
    c10::cuda::CUDAStreamGuard streamGuard(internalStream_);
    translateErrors([&] { state_->comm->groupEnd(); });  // launches the block's sends and receives
  }
  end->record(*state_->events, capturing(internalStream_.stream()));
  const OpInfo op{::c10d::OpType::COALESCED, "coalesced", true, ::c10d::kUnsetTimeout};
  watchdog_->track(end, workSpec(op));
  return makeWork(op, std::move(end), std::move(outputs));
}

void MeshcommBackend::checkTensor(const char* op, const char* argument, const at::Tensor& t) const {
  ::meshcomm::torch_backend::checkTensor(context(op), argument, t, state_->device);
}

WorkSpec MeshcommBackend::workSpec(const OpInfo& op) const {
  const auto timeout = op.timeout == ::c10d::kUnsetTimeout ? options_->timeout : op.timeout;
  return WorkSpec{op.name, seq_, timeout, op.blocking};
}

c10::intrusive_ptr<MeshcommWork> MeshcommBackend::makeWork(const OpInfo& op, std::shared_ptr<WorkEnd> end,
                                                           std::vector<at::Tensor> outputs) const {
  return c10::make_intrusive<MeshcommWork>(state_, op.type, workSpec(op), std::move(end), std::move(outputs));
}

c10::cuda::CUDAStream MeshcommBackend::beginOp(const OpInfo& op, const c10::cuda::CUDAStream& current) {
  TORCH_CHECK(state_->comm, "meshcomm: rank ", getRank(), ": ", op.name, ": process group was shut down");
  state_->throwIfFailed(op.name);
  if (!op.asyncOp && !coalescing_) return current;
  return joinInternalStream(*state_->events, current, internalStream_);
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::finishOp(const OpInfo& op,
                                                           const c10::cuda::CUDAStream& stream,
                                                           bool onCurrentStream,
                                                           c10::ArrayRef<at::Tensor> inputs,
                                                           std::vector<at::Tensor> outputs) {
  if (!onCurrentStream) {
    // The caching allocator must not hand these blocks out again before the internal stream is done.
    recordStreams(inputs, stream);
    recordStreams(outputs, stream);
  }
  ++seq_;
  if (coalescing_) {
    coalescedOutputs_.insert(coalescedOutputs_.end(), outputs.begin(), outputs.end());
    return makeWork(op, coalescedEnd_, outputs);
  }
  auto end = std::make_shared<WorkEnd>(stream);
  if (op.asyncOp) {
    end->record(*state_->events, capturing(stream.stream()));
    watchdog_->track(end, workSpec(op));  // not in a capture (an event recorded there cannot be queried)
  } else {
    end->deferred = true;  // ran on the caller's current stream (beginOp): recorded if someone asks
  }
  return makeWork(op, std::move(end), std::move(outputs));
}

}  // namespace meshcomm::torch_backend
