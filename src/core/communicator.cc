#include "meshcomm/communicator.hpp"

#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <iomanip>

#include "base/bounded_text.hpp"
#include "base/logging.hpp"
#include "core/communicator_impl.hpp"
#include "base/kernel_modules.hpp"
#include "core/fd_broker.hpp"
#include "core/peer_mapping_cache.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace internal {

int internalTag(TagSpace space, int userTag, const char* what, int rank, int peer) {
  const int s = static_cast<int>(space);
  if (s < 0 || s >= kMaxTagSpaces) {
    MESHCOMM_THROW(ErrorCode::InternalError, "rank ", rank, ": ", what, " with peer ", peer, ": tag space ",
                   s, " out of range");
  }
  if (userTag < 0 || userTag >= (1 << kTagSpaceBits)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": ", what, " with peer ", peer, ": tag ", userTag,
                   " out of range [0, ", (1 << kTagSpaceBits), ")");
  }
  return kInternalTagBase + (s << kTagSpaceBits) + userTag;
}

std::optional<LocalMemoryView> findLocalMemory(const Communicator& comm, uint64_t id) {
  return comm.impl().registry->find(id);
}

}  // namespace internal

namespace {

std::shared_ptr<Bootstrap> requireBootstrap(std::shared_ptr<Bootstrap> b) {
  if (!b) MESHCOMM_THROW(ErrorCode::InvalidUsage, "Communicator: null bootstrap");
  return b;
}

int resolveDevice(int cudaDevice, int rank) {
  int device = cudaDevice;
  if (device < 0) {
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      MESHCOMM_THROW(ErrorCode::CudaError, "rank ", rank,
                     ": Communicator: cudaGetDevice failed: ", cudaGetErrorName(err), " (",
                     cudaGetErrorString(err), ")");
    }
  }
  const int n = gpuCount();
  if (device >= n) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": Communicator: CUDA device ", device,
                   " does not exist (this process sees ", n, " device(s))");
  }
  return device;
}

bool readForceTcp(int rank) {
  std::string v = envString("MESHCOMM_TRANSPORT");
  std::string lower = v;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "auto") return false;
  if (lower == "tcp") return true;
  MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": MESHCOMM_TRANSPORT='", boundedText(v),
                 "' is not a transport (use auto or tcp)");
}

uint64_t readDeviceTimeoutNs(int rank) {
  int64_t ms = envInt("MESHCOMM_DEVICE_TIMEOUT_MS");
  if (ms < 0) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": MESHCOMM_DEVICE_TIMEOUT_MS=", ms,
                   " is negative (0 disables the timeout)");
  }
  const uint64_t maxMs = UINT64_MAX / 1000000ull;
  return static_cast<uint64_t>(ms) > maxMs ? UINT64_MAX : static_cast<uint64_t>(ms) * 1000000ull;
}

const char* deviceOpName(uint32_t op) {
  switch (static_cast<DeviceOp>(op)) {
    case DeviceOp::None:
      return "wait";
    case DeviceOp::SemaphoreWait:
      return "SemaphoreWait";
    case DeviceOp::HostSemaphoreWait:
      return "HostSemaphoreWait";
    case DeviceOp::PacketRead:
      return "PacketRead";
    case DeviceOp::FifoPush:
      return "FifoPush";
    case DeviceOp::FifoFlush:
      return "FifoFlush";
    case DeviceOp::CountMismatch:
      return "CountMismatch";
    case DeviceOp::SendCountMismatch:
      return "SendCountMismatch";
    case DeviceOp::EpOverflow:
      return "EpOverflow";
    case DeviceOp::EpStagingOverflow:
      return "EpStagingOverflow";
    case DeviceOp::EpBadExpert:
      return "EpBadExpert";
    case DeviceOp::EpDispatchWait:
      return "EpDispatchWait";
    case DeviceOp::EpCombineWait:
      return "EpCombineWait";
  }
  return "unknown-op";
}

}  // namespace

// ---- Communicator::Impl ------------------------------------------------------------------------------

Communicator::Impl::Impl(std::shared_ptr<Bootstrap> bootstrapIn, int cudaDevice)
    : bootstrap(requireBootstrap(std::move(bootstrapIn))),
      rank(bootstrap->rank()),
      size(bootstrap->size()),
      device(resolveDevice(cudaDevice, rank)),
      hostId(bootstrap->hostId(rank)),
      forceTcp(readForceTcp(rank)),
      deviceTimeoutNs(readDeviceTimeoutNs(rank)),
      fetchTimeoutSec(FdBroker::defaultTimeoutSec()),
      registry(std::make_shared<LocalRegistry>(rank)) {
  if (rank < 0 || size <= 0 || rank >= size) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "Communicator: bootstrap reports rank ", rank, " of ", size);
  }
  requireValidLogLevel();
  CudaDeviceGuard guard(device);
  errorReport_ = HostMappedBuffer(sizeof(DeviceErrorReport));
  // Before any meshcomm kernel runs here: a lazy first-time load of one of them while another waits on a
  // peer or a proxy would stall that wait (base/kernel_modules.hpp).
  internal::loadRegisteredKernelModules(device);
  MESHCOMM_LOG(INFO, who(), ": communicator on device ", device, " (", size, " ranks, transport ",
               forceTcp ? "tcp" : "auto", ", device timeout ", deviceTimeoutNs / 1000000ull, " ms)");
}

Communicator::Impl::~Impl() {
  try {
    CudaDeviceGuard guard(device);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      MESHCOMM_LOG(WARN, who(), ": ~Communicator: cudaDeviceSynchronize failed: ", cudaGetErrorString(err));
    }
  } catch (...) {
  }
  try {
    std::lock_guard<std::mutex> lock(poolMu_);
    deviceTokens_.chunks.clear();  // chunks still held by semaphores stay alive until those go
    hostTokens_.chunks.clear();
    counterChunks_.clear();
  } catch (...) {
  }
  // errorReport_ is freed by its destructor; registry lives on while registrations refer to it.
}

std::string Communicator::Impl::who() const {
  return detail::concat("rank ", rank);
}

void Communicator::Impl::checkPeer(int peer, const char* op) const {
  if (peer < 0 || peer >= size) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who(), ": ", op, ": peer ", peer, " out of range [0, ", size,
                   ")");
  }
}

RegisteredMemory Communicator::Impl::registerMemory(void* ptr, size_t bytes,
                                                    std::shared_ptr<void> keepAlive) {
  return RegisteredMemory(
      registerLocalMemory(registry, rank, device, hostId, ptr, bytes, std::move(keepAlive)));
}

void Communicator::Impl::sendMemory(const RegisteredMemory& mem, int peer, int tag) {
  checkPeer(peer, "sendMemory");
  const std::string context = detail::concat(who(), ": sendMemory to peer ", peer, " (tag ", tag, ")");
  MESHCOMM_REQUIRE(mem, context, ": empty RegisteredMemory");
  MESHCOMM_REQUIRE(tag >= 0, context, ": negative tag");
  MESHCOMM_REQUIRE(mem.isLocal(), context, ": memory id ", mem.id(), " belongs to rank ", mem.rank(),
                   "; a rank sends only its own registrations");
  registry->share(mem.id(), peer, context);  // from now on the peer may address it over TCP
  bootstrap->sendBytes(mem.impl()->serialize(), peer, tag);
}

RegisteredMemory Communicator::Impl::recvMemory(int peer, int tag) {
  checkPeer(peer, "recvMemory");
  MESHCOMM_REQUIRE(tag >= 0, who(), ": recvMemory from peer ", peer, ": negative tag ", tag);
  const std::string context = detail::concat(who(), ": recvMemory from peer ", peer, " (tag ", tag, ")");
  const MemoryDescriptor d = MemoryDescriptor::fromPeer(bootstrap->recvBytes(peer, tag), peer, context);
  const bool deviceMemory = d.memoryKind() != MemoryKind::Host;
  const bool sameHost = d.hostId == hostId && d.hostId == bootstrap->hostId(peer);
  if (!deviceMemory || !sameHost || transportTo(peer) != Transport::CudaIpc) {
    return RegisteredMemory(std::make_shared<RegisteredMemory::Impl>(d, nullptr, nullptr));
  }
  if (d.ownerPid == static_cast<uint64_t>(::getpid())) {
    // Same process (e.g. one communicator per GPU in one process): the owner's own registration gives the
    // address.
    void* p = LocalRegistry::sameProcessAddress(d, rank, context);
    enablePeerAccess(device, d.deviceIndex, context);
    return RegisteredMemory(std::make_shared<RegisteredMemory::Impl>(d, p, nullptr));
  }
  std::shared_ptr<const PeerMapping> mapping =
      PeerMappingCache::instance().acquire(d, device, fetchTimeoutSec, context);
  void* p = static_cast<char*>(mapping->base) + d.offsetFromBase;
  return RegisteredMemory(std::make_shared<RegisteredMemory::Impl>(d, p, std::move(mapping)));
}

Transport Communicator::Impl::transportTo(int peer) const {
  checkPeer(peer, "transportTo");
  if (forceTcp) return Transport::Tcp;
  return bootstrap->hostId(peer) == hostId ? Transport::CudaIpc : Transport::Tcp;
}

Communicator::Token Communicator::Impl::allocateFrom(TokenPool& pool, bool hostMapped) {
  std::lock_guard<std::mutex> lock(poolMu_);
  if (pool.chunks.empty() || pool.used == kSlotsPerChunk) {
    CudaDeviceGuard guard(device);
    void* p = nullptr;
    std::shared_ptr<void> owner;
    if (hostMapped) {
      auto buffer = std::make_shared<HostMappedBuffer>(kPoolChunkBytes);  // zeroed; host == device address
      p = buffer->host();
      owner = std::move(buffer);
    } else {
      auto buffer = std::make_shared<GpuBuffer>(kPoolChunkBytes, GpuMemoryKind::CudaMalloc);
      p = buffer->data();
      owner = std::move(buffer);
    }
    pool.chunks.push_back(registerMemory(p, kPoolChunkBytes, std::move(owner)));
    pool.used = 0;
  }
  const uint64_t offset = static_cast<uint64_t>(pool.used++) * sizeof(uint64_t);
  return Communicator::Token{pool.chunks.back(), offset};
}

Communicator::Token Communicator::Impl::allocateToken() {
  return allocateFrom(deviceTokens_, false);
}

Communicator::Token Communicator::Impl::allocateHostToken() {
  return allocateFrom(hostTokens_, true);
}

uint64_t* Communicator::Impl::allocateCounter() {
  std::lock_guard<std::mutex> lock(poolMu_);
  if (counterChunks_.empty() || countersUsed_ == kSlotsPerChunk) {
    CudaDeviceGuard guard(device);
    counterChunks_.push_back(std::make_unique<GpuBuffer>(kPoolChunkBytes, GpuMemoryKind::CudaMalloc));
    countersUsed_ = 0;
  }
  return static_cast<uint64_t*>(counterChunks_.back()->data()) + countersUsed_++;
}

SpinContext Communicator::Impl::spinContext(int peer) const {
  if (peer < -1 || peer >= size) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who(), ": spinContext: peer ", peer, " out of range [-1, ", size,
                   ")");
  }
  SpinContext ctx{};
  ctx.report = static_cast<DeviceErrorReport*>(errorReport_.device());
  ctx.timeoutNs = deviceTimeoutNs;
  ctx.rank = rank;
  ctx.peer = peer;
  return ctx;
}

void Communicator::Impl::checkDeviceError() const {
  // Written by the GPU (fields, __threadfence_system, then `aborted`); read newest-first through volatile.
  auto* r = reinterpret_cast<volatile DeviceErrorReport*>(errorReport_.host());
  if (r->aborted == 0) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint32_t op = r->op;
  const int32_t wrank = r->rank;
  const int32_t peer = r->peer;
  const uint64_t expected = r->expected;
  const uint64_t observed = r->observed;
  const uint64_t waitedNs = r->waitedNs;
  if (op == static_cast<uint32_t>(DeviceOp::None)) {
    MESHCOMM_THROW(ErrorCode::Timeout, who(), ": a device wait was aborted (no failure recorded)");
  }
  std::ostringstream ms;
  ms << std::fixed << std::setprecision(1) << static_cast<double>(waitedNs) / 1e6;
  if (op == static_cast<uint32_t>(DeviceOp::CountMismatch) && expected == observed) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", wrank, ": counts disagree with peer ", peer,
                   ": the operations between the two ranks have other sizes on each side (", expected,
                   " bytes from the peer in all)");
  }
  if (op == static_cast<uint32_t>(DeviceOp::CountMismatch)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", wrank, ": counts disagree with peer ", peer,
                   ": this rank expected ", expected, " bytes, the peer sent ", observed,
                   " (nothing was written past the expected count)");
  }
  if (op == static_cast<uint32_t>(DeviceOp::SendCountMismatch)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", wrank, ": counts disagree with peer ", peer,
                   ": this rank sent ", expected, " bytes, the peer expected ", observed);
  }
  if (op == static_cast<uint32_t>(DeviceOp::EpOverflow)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", wrank, ": expert-parallel buffer too small: rank ", peer,
                   " would receive ", expected, " rows or tokens, its buffer holds ", observed,
                   " (nothing was written; give the Buffer more bytes)");
  }
  if (op == static_cast<uint32_t>(DeviceOp::EpStagingOverflow)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", wrank,
                   ": expert-parallel buffer too small to stage the rows for other nodes: this rank stages ",
                   expected, " rows, its staging area holds ", observed,
                   " (nothing was sent; give the Buffer more bytes: num_rdma_bytes adds to the region)");
  }
  if (op == static_cast<uint32_t>(DeviceOp::EpBadExpert)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", wrank, ": expert index ", static_cast<int64_t>(observed),
                   " outside [-1, ", expected, ") in topk_idx");
  }
  const std::string waitingFor = peer >= 0 ? detail::concat("peer ", peer) : std::string("the proxy");
  MESHCOMM_THROW(ErrorCode::Timeout, "rank ", wrank, ": device ", deviceOpName(op), " waiting for ",
                 waitingFor, " timed out after ", ms.str(), " ms (expected ", expected, ", observed ",
                 observed, ")");
}

void Communicator::Impl::abortDeviceWaits() {
  auto* r = reinterpret_cast<volatile DeviceErrorReport*>(errorReport_.host());
  std::atomic_thread_fence(std::memory_order_seq_cst);
  r->aborted = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Communicator::Impl::clearDeviceError() {
  auto* r = reinterpret_cast<volatile DeviceErrorReport*>(errorReport_.host());
  r->op = 0;
  r->rank = 0;
  r->peer = 0;
  r->expected = 0;
  r->observed = 0;
  r->waitedNs = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  r->aborted = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// ---- Communicator ------------------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<Bootstrap> bootstrap, int cudaDevice)
    : impl_(std::make_unique<Impl>(std::move(bootstrap), cudaDevice)) {}

Communicator::~Communicator() = default;

Bootstrap& Communicator::bootstrap() const {
  return *impl_->bootstrap;
}
std::shared_ptr<Bootstrap> Communicator::bootstrapPtr() const {
  return impl_->bootstrap;
}
int Communicator::rank() const {
  return impl_->rank;
}
int Communicator::size() const {
  return impl_->size;
}
int Communicator::cudaDevice() const {
  return impl_->device;
}

RegisteredMemory Communicator::registerMemory(void* ptr, size_t bytes) {
  return impl_->registerMemory(ptr, bytes);
}

void Communicator::sendMemory(const RegisteredMemory& mem, int peer, int tag) {
  impl_->sendMemory(mem, peer, tag);
}

RegisteredMemory Communicator::recvMemory(int peer, int tag) {
  return impl_->recvMemory(peer, tag);
}

Transport Communicator::transportTo(int peer) const {
  return impl_->transportTo(peer);
}

std::shared_ptr<Connection> Communicator::connect(int peer, int tag) {
  impl_->checkPeer(peer, "connect");
  return connect(peer, tag, impl_->transportTo(peer));
}

std::shared_ptr<Connection> Communicator::connect(int peer, int tag, Transport transport) {
  impl_->checkPeer(peer, "connect");
  MESHCOMM_REQUIRE(tag >= 0, impl_->who(), ": connect to peer ", peer, ": negative tag ", tag);
  MESHCOMM_REQUIRE(transport != Transport::CudaIpc || impl_->bootstrap->hostId(peer) == impl_->hostId,
                   impl_->who(), ": connect to peer ", peer, ": CUDA IPC needs a peer on this host");
  switch (transport) {
    case Transport::CudaIpc:
      return internal::makeCudaIpcConnection(*this, peer, tag);
    case Transport::Tcp:
      return internal::makeTcpConnection(*this, peer, tag);
  }
  MESHCOMM_THROW(ErrorCode::InternalError, impl_->who(), ": connect: unknown transport");
}

SpinContext Communicator::spinContext(int peer) const {
  return impl_->spinContext(peer);
}
void Communicator::checkDeviceError() const {
  impl_->checkDeviceError();
}
void Communicator::clearDeviceError() {
  impl_->clearDeviceError();
}
void Communicator::abortDeviceWaits() {
  impl_->abortDeviceWaits();
}

Communicator::Token Communicator::allocateToken() {
  return impl_->allocateToken();
}
Communicator::Token Communicator::allocateHostToken() {
  return impl_->allocateHostToken();
}
uint64_t* Communicator::allocateCounter() {
  return impl_->allocateCounter();
}

uint64_t* Communicator::Token::devicePtr() const {
  if (!pool) return nullptr;
  return reinterpret_cast<uint64_t*>(static_cast<char*>(pool.data()) + offset);
}

}  // namespace meshcomm
