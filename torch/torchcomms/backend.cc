// MeshcommTorchComm: init, finalize, split and the common enqueue path (see backend.hpp).
#include "backend.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>

#include "checks.hpp"
#include "group_rank.hpp"
#include "meshcomm/split.hpp"
#include "window.hpp"

namespace meshcomm::torch_backend {

namespace {

constexpr const char* kVersion = MESHCOMM_VERSION;

// The device a communicator runs on: an indexed CUDA device as given; an index-less one is the group's
// (c10d routing: its bound device, else the current one), else rank % count (as torchcomms' NCCL backend).
at::Device commDevice(const at::Device& device, const GroupRank& group) {
  const int rank = group.rank;
  TORCH_CHECK(
      device.is_cuda(), "meshcomm: rank ", rank, ": init: device ", device,
      " is not a CUDA device (meshcomm runs CUDA tensors only; use torchcomms' gloo backend for CPU)");
  const int count = c10::cuda::device_count();
  TORCH_CHECK(count > 0, "meshcomm: rank ", rank, ": init: no CUDA device is visible");
  if (device.has_index()) {
    TORCH_CHECK(device.index() < count, "meshcomm: rank ", rank, ": init: device ", device, " but only ",
                count, " CUDA devices are visible");
    return device;
  }
  if (group.device >= 0) {
    TORCH_CHECK(group.device < count, "meshcomm: rank ", rank,
                ": init: the group's device cuda:", group.device, " but only ", count,
                " CUDA devices are visible");
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(group.device));
  }
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank % count));
}

AsyncErrorHandling errorHandling(const torch::comms::CommOptions& options) {
  // Abort the process (torchcomms' default), or abort the communicator and raise at the next op or wait.
  return options.abort_process_on_timeout_or_error ? AsyncErrorHandling::SkipCleanUp
                                                   : AsyncErrorHandling::CleanUpOnly;
}

// The store of a communicator created without one: a TCPStore on MASTER_ADDR:MASTER_PORT. Under torchrun
// the agent already serves it (TORCHELASTIC_USE_AGENT_STORE=True) and every rank is a client; otherwise rank
// 0 serves it (torch's env:// rule).
c10::intrusive_ptr<c10d::Store> storeFromEnvironment(int rank, std::chrono::milliseconds timeout) {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  TORCH_CHECK(
      addr != nullptr && port != nullptr, "meshcomm: rank ", rank,
      ": init: no store was given and MASTER_ADDR/MASTER_PORT are not set (pass store= to new_comm, or "
      "launch with torchrun)");
  const std::string portText(port);
  TORCH_CHECK(!portText.empty() && portText.size() <= 5 &&
                  portText.find_first_not_of("0123456789") == std::string::npos &&
                  std::stoi(portText) < 65536,
              "meshcomm: rank ", rank, ": init: MASTER_PORT='", portText, "' is not a port number");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(std::stoi(portText));
  opts.isServer = rank == 0 && !(agent != nullptr && std::string(agent) == "True");
  opts.waitWorkers = false;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(std::string(addr), opts);
}

// The store key of a communicator's UniqueId: its name and how many communicators of that name this process
// built before (every rank builds the same sequence), so a key left by an earlier one is never read.
std::string uniqueIdKey(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, int> built;
  std::lock_guard<std::mutex> lock(mutex);
  return "meshcomm/" + name + "/" + std::to_string(built[name]++) + "/unique_id";
}

// A 64-bit FNV-1a of the rank list: the split's agreement value (every member of a group passes the same).
uint64_t listSignature(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint64_t>((static_cast<uint32_t>(r) >> (8 * b)) & 0xff);
      h *= 1099511628211ull;
    }
  }
  return h ^ ranks.size();
}

}  // namespace

MeshcommTorchComm::~MeshcommTorchComm() {
  if (state_ == nullptr || finalized_) return;
  TORCH_WARN("meshcomm: rank ", rank_, ": communicator '", name_,
             "' destroyed without finalize(); tearing it down now");
  try {
    runner_->close("destroyed");
    std::lock_guard<std::mutex> lock(state_->mutex);
    c10::cuda::CUDAGuard guard(device_);
    if (state_->comm) {
      state_->closing = std::move(state_->comm);
      state_->closing->beginClose();
    }
  } catch (const std::exception& e) {
    TORCH_WARN("meshcomm: rank ", rank_, ": communicator '", name_, "' teardown: ", e.what());
  }
}

std::string_view MeshcommTorchComm::getBackendVersion() const {
  return kVersion;
}

void MeshcommTorchComm::init(at::Device device, const std::string& name,
                             const torch::comms::CommOptions& options) {
  TORCH_CHECK(state_ == nullptr, "meshcomm: init: communicator '", name_, "' is already initialized");
  const GroupRank group = resolveGroupRank();
  TORCH_CHECK(!options.enable_reconfigure, "meshcomm: rank ", group.rank,
              ": init: enable_reconfigure is not "
              "supported (meshcomm communicators are built at new_comm and by split)");
  TORCH_CHECK(group.size > 0 && group.rank >= 0 && group.rank < group.size, "meshcomm: init: rank ",
              group.rank, " of ", group.size, " (from ", group.source, ") is out of range");
  rank_ = group.rank;
  size_ = group.size;
  const at::Device cudaDevice = commDevice(device, group);
  settings_ = commSettings(rank_, options.hints);
  {
    c10::cuda::CUDAGuard guard(cudaDevice);
    // Rank 0 publishes the UniqueId in the given store, or in the TCPStore on MASTER_ADDR/MASTER_PORT (as
    // torchcomms' NCCL backend); the store is needed during init only.
    c10::intrusive_ptr<c10d::Store> store = options.store;
    if (!store) store = storeFromEnvironment(rank_, options.timeout);
    std::unique_ptr<Comm> comm =
        createComm(store, uniqueIdKey(name), rank_, size_, cudaDevice, settings_.resources);
    adopt(std::move(comm), cudaDevice, name, options);
  }
  // As torchcomms' NCCL backend: the communicator's device becomes the current one (after the guard above,
  // which restores the previous device), so that tensors made on an index-less torch.device("cuda") land on
  // it.
  c10::cuda::set_device(cudaDevice.index());
}

void MeshcommTorchComm::adopt(std::unique_ptr<Comm> comm, at::Device device, const std::string& name,
                              const torch::comms::CommOptions& options) {
  rank_ = comm->rank();
  size_ = comm->size();
  device_ = device;
  name_ = name;
  options_ = options;
  options_.store = nullptr;  // used during init only: drop it (and its connections)
  state_ = std::make_shared<CommState>(rank_, size_, device_);
  state_->comm = std::move(comm);
  runner_ = std::make_shared<OpRunner>(state_, name_, options_.timeout, options_.high_priority_stream);
  // Abort hooks run before a mode that ends the process does so (torchcomms' contract). The watchdog is
  // stopped before this object goes away (finalize, destructor).
  runner_->startWatchdog(errorHandling(options_),
                         std::string("abort_process_on_timeout_or_error=") +
                             (options_.abort_process_on_timeout_or_error ? "true" : "false"),
                         [this] { runAbortHooks(); });
}

void MeshcommTorchComm::finalize() {
  TORCH_CHECK(state_ != nullptr, "meshcomm: finalize: the communicator was never initialized");
  TORCH_CHECK(!finalized_, "meshcomm: rank ", rank_, ": finalize: communicator '", name_,
              "' was already finalized");
  finalized_ = true;
  c10::cuda::CUDAGuard guard(device_);
  // Everything enqueued on the internal stream, and every synchronous op (on the caller's streams: the
  // device), finishes first; a failure the watchdog recorded, or a device error, is raised.
  std::exception_ptr failure;
  try {
    C10_CUDA_CHECK(cudaDeviceSynchronize());
    state_->throwIfFailed("finalize");
    state_->checkDeviceError();
  } catch (...) {
    failure = std::current_exception();
  }
  runner_->close("finalized");
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->comm) {
      state_->closing = std::move(state_->comm);
      try {
        state_->closing->beginClose();
      } catch (const std::exception& e) {  // a peer already gone: its own teardown does not need our word
        TORCH_WARN("meshcomm: rank ", rank_, ": finalize: ", e.what());
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
}

std::shared_ptr<torch::comms::TorchCommBackend> MeshcommTorchComm::split(
    const std::vector<int>& ranks, const std::string& name, const torch::comms::CommOptions& options) {
  const char* op = "split";
  TORCH_CHECK(state_ != nullptr && !finalized_, "meshcomm: rank ", rank_, ": split: communicator '", name_,
              "' is ", state_ == nullptr ? "not initialized" : "finalized");
  state_->throwIfFailed(op);
  std::unordered_set<int> seen;
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < size_, "meshcomm: rank ", rank_, ": split: ranks: rank ", r,
                " out of range [0, ", size_, ")");
    TORCH_CHECK(seen.insert(r).second, "meshcomm: rank ", rank_, ": split: ranks: rank ", r,
                " appears more than once");
  }
  const auto self = std::find(ranks.begin(), ranks.end(), rank_);
  TORCH_CHECK(
      ranks.empty() || self != ranks.end(), "meshcomm: rank ", rank_,
      ": split: ranks: this rank is not in the list it passed (a rank that joins no group passes [])");
  CommSettings settings = settings_;
  if (!options.hints.empty()) settings = commSettings(rank_, options.hints);
  // color = the group's lowest rank, key = the caller's index: the members come back in the list's order.
  SplitRequest request;
  if (!ranks.empty()) {
    request.color = *std::min_element(ranks.begin(), ranks.end());
    request.key = static_cast<int>(self - ranks.begin());
    request.signature = listSignature(ranks);
  }
  c10::cuda::CUDAGuard guard(device_);
  std::unique_ptr<Comm> child;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    TORCH_CHECK(state_->comm, "meshcomm: rank ", rank_, ": split: communicator was shut down");
    CommConfig config;
    config.cudaDevice = device_.index();
    config.resources = settings.resources;
    child = translateErrors([&] { return splitComm(*state_->comm, request, config); });
  }
  if (child == nullptr) return nullptr;
  auto backend = std::make_shared<MeshcommTorchComm>();
  torch::comms::CommOptions childOptions = options;
  backend->settings_ = settings;
  backend->adopt(std::move(child), device_, name, childOptions);
  return backend;
}

std::shared_ptr<torch::comms::TorchCommWindow> MeshcommTorchComm::new_window(
    const std::optional<at::Tensor>& tensor) {
  TORCH_CHECK(runner_ != nullptr && !finalized_, "meshcomm: rank ", rank_, ": new_window: communicator '",
              name_, "' is ", runner_ == nullptr ? "not initialized" : "finalized");
  auto window = std::make_shared<MeshcommTorchWindow>(runner_);
  if (tensor.has_value()) window->tensor_register(*tensor, /*owning=*/true);
  return window;
}

void MeshcommTorchComm::checkTensor(const char* op, const char* argument, const at::Tensor& t) const {
  ::meshcomm::torch_backend::checkTensor(context(op), argument, t, device_);
}

void MeshcommTorchComm::checkList(const char* op, const char* argument, const std::vector<at::Tensor>& list,
                                  size_t expected) const {
  checkCount(context(op), argument, list.size(), expected);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = std::string(argument) + "[" + std::to_string(i) + "]";
    checkTensor(op, name.c_str(), list[i]);
  }
}

}  // namespace meshcomm::torch_backend
