// CommState and the store-based bootstrap of a group's Comm (see comm_state.hpp).
#include "comm_state.hpp"

#include <c10/util/Exception.h>

#include <cstring>
#include <vector>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::torch_backend {

namespace {

UniqueId exchangeUniqueId(const c10::intrusive_ptr<::c10d::Store>& store, const std::string& key, int rank,
                          int size) {
  UniqueId id;
  if (rank == 0) {
    id = TcpBootstrap::createUniqueId(size);
    store->set(key, std::vector<uint8_t>(id.bytes.begin(), id.bytes.end()));
    return id;
  }
  const std::vector<uint8_t> bytes = store->get(key);  // waits up to the store's timeout
  TORCH_CHECK(bytes.size() == id.bytes.size(), "meshcomm: rank ", rank, ": init: store key ", key, " holds ",
              bytes.size(), " bytes, expected ", id.bytes.size());
  std::memcpy(id.bytes.data(), bytes.data(), id.bytes.size());
  return id;
}

}  // namespace

CommState::CommState(int rank, int size, at::Device device)
    : rank(rank), size(size), device(device), events(EventPool::create(device.index())) {}

void CommState::checkDeviceError() {
  std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
  if (!lock.owns_lock() || comm == nullptr) return;
  translateErrors([&] { comm->checkError(); });
}

void CommState::recordFailure(const std::string& what, bool timedOut) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (failed_.load(std::memory_order_relaxed)) return;  // the first failure is the one to report
  failure_ = what;
  failureTimedOut_ = timedOut;
  failed_.store(true, std::memory_order_release);
}

bool CommState::failureIsTimeout() const {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failureTimedOut_;
}

std::optional<std::string> CommState::failure() const {
  if (!failed()) return std::nullopt;
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_;
}

void CommState::throwIfFailed(const char* op) const {
  if (!failed()) return;
  std::lock_guard<std::mutex> lock(failureMutex_);
  C10_THROW_ERROR(DistBackendError,
                  c10::str("meshcomm: rank ", rank, ": ", op,
                           ": the process group failed earlier (found by its watchdog): ", failure_));
}

void rethrowAsDistBackendError(const std::exception& e) {
  C10_THROW_ERROR(DistBackendError, std::string("meshcomm: ") + e.what());
}

std::unique_ptr<Comm> createComm(const c10::intrusive_ptr<::c10d::Store>& store, const std::string& key,
                                 int rank, int size, const at::Device& device,
                                 const CommResourcesConfig& resources) {
  return translateErrors([&] {
    const UniqueId id = exchangeUniqueId(store, key, rank, size);
    auto bootstrap = std::make_shared<TcpBootstrap>(rank, size, id);
    CommConfig config;
    config.cudaDevice = device.index();
    config.resources = resources;
    return std::make_unique<Comm>(std::move(bootstrap), config);
  });
}

}  // namespace meshcomm::torch_backend
