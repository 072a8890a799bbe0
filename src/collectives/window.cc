// Window (include/meshcomm/window.hpp): registration, peer mappings and semaphores per peer; the put,
// signal and wait kernels are in window_kernels.cu.
#include "meshcomm/window.hpp"

#include <vector>

#include "base/logging.hpp"
#include "collectives/memory_exchange.hpp"
#include "collectives/window_kernels.cuh"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/semaphore.hpp"

namespace meshcomm {

namespace {

constexpr int kWindowTag = 0x3c00000 + 48;  // distinct from CommResources' and BufferRegistry's tags

}  // namespace

class Window::Impl {
 public:
  Impl(Comm& comm, void* base, size_t bytes) : comm_(comm), rank_(comm.rank()), size_(comm.size()) {
    MESHCOMM_REQUIRE(base != nullptr && bytes > 0, "rank ", rank_, ": Window: the window is ",
                     base == nullptr ? "a null pointer" : "empty", " (register a non-empty device buffer)");
    Communicator& c = comm.communicator();
    CudaDeviceGuard guard(comm.cudaDevice());
    memories_ = exchangeWithAllPeers(c, c.registerMemory(base, bytes), kWindowTag, "Window: the window");
    semaphores_.resize(size_);
    handles_.resize(size_);
    std::vector<std::shared_ptr<Connection>> connections(size_);
    for (int p = 0; p < size_; ++p)  // ascending peer order on every rank: the pairs' global order
      if (p != rank_) connections[p] = c.connect(p, kWindowTag);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      semaphores_[p] = std::make_shared<MemoryDevice2DeviceSemaphore>(c, connections[p], kWindowTag);
      handles_[p] = semaphores_[p]->deviceHandle();
    }
    // A rank signals itself through its own token.
    selfToken_ = c.allocateToken();
    MemoryDevice2DeviceSemaphoreDeviceHandle& self = handles_[rank_];
    self.local.inbound = selfToken_.devicePtr();
    self.local.expectedInbound = c.allocateCounter();
    self.remoteInbound = selfToken_.devicePtr();
    self.spin = c.spinContext(rank_);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    {
      CudaDeviceGuard guard(comm_.cudaDevice());
      MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());  // this GPU is done with every window
    }
    comm_.communicator().bootstrap().barrier();  // and so is every peer's
    semaphores_.clear();
    memories_.clear();
  }

  void requirePeer(int peer, const char* op) const {
    MESHCOMM_REQUIRE(!closed_, "rank ", rank_, ": Window::", op, ": the window was closed");
    MESHCOMM_REQUIRE(peer >= 0 && peer < size_, "rank ", rank_, ": Window::", op, ": peer ", peer,
                     " out of range [0, ", size_, ")");
  }

  Comm& comm_;
  const int rank_, size_;
  bool closed_ = false;
  std::vector<RegisteredMemory> memories_;  // [peer]: the peer's window mapped here; own at [rank]
  std::vector<std::shared_ptr<MemoryDevice2DeviceSemaphore>> semaphores_;  // [peer], null at [rank]
  std::vector<MemoryDevice2DeviceSemaphoreDeviceHandle> handles_;          // [peer], self at [rank]
  Communicator::Token selfToken_;
};

Window::Window(Comm& comm, void* base, size_t bytes) : impl_(std::make_unique<Impl>(comm, base, bytes)) {}

Window::~Window() {
  try {
    close();
  } catch (const std::exception& e) {
    MESHCOMM_LOG(WARN, "rank ", impl_->rank_, ": Window teardown: ", e.what());
  }
}

void Window::close() {
  impl_->close();
}

int Window::rank() const {
  return impl_->rank_;
}
int Window::size() const {
  return impl_->size_;
}
void* Window::data() const {
  return peerData(impl_->rank_);
}
size_t Window::bytes() const {
  return peerBytes(impl_->rank_);
}
void* Window::peerData(int peer) const {
  impl_->requirePeer(peer, "peerData");
  return impl_->memories_[peer].data();
}
size_t Window::peerBytes(int peer) const {
  impl_->requirePeer(peer, "peerBytes");
  return impl_->memories_[peer].size();
}

void Window::put(const void* src, size_t bytes, int peer, size_t dstOffset, cudaStream_t stream) {
  impl_->requirePeer(peer, "put");
  const size_t capacity = impl_->memories_[peer].size();
  MESHCOMM_REQUIRE(dstOffset <= capacity && bytes <= capacity - dstOffset, "rank ", impl_->rank_,
                   ": Window::put: bytes [", dstOffset, ", ", dstOffset + bytes, ") do not fit peer ", peer,
                   "'s window of ", capacity, " bytes");
  MESHCOMM_REQUIRE(src != nullptr || bytes == 0, "rank ", impl_->rank_, ": Window::put: null source");
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  window::launchPut(static_cast<char*>(impl_->memories_[peer].data()) + dstOffset, src, bytes, stream);
}

void Window::signal(int peer, cudaStream_t stream) {
  impl_->requirePeer(peer, "signal");
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  window::launchSignal(impl_->handles_[peer], stream);
}

void Window::waitSignal(int peer, cudaStream_t stream) {
  impl_->requirePeer(peer, "waitSignal");
  CudaDeviceGuard guard(impl_->comm_.cudaDevice());
  window::launchWait(impl_->handles_[peer], stream);
}

}  // namespace meshcomm
