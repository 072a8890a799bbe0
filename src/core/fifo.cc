#include "core/fifo.hpp"

#include "core/proxy_trigger.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::internal {

namespace {
constexpr size_t kRingOffset = 0;
}  // namespace

uint64_t Fifo::validatedSize(int64_t requested, const char* source) {
  const bool powerOfTwo = requested > 0 && (requested & (requested - 1)) == 0;
  MESHCOMM_REQUIRE(powerOfTwo && static_cast<uint64_t>(requested) <= kMaxSize, "FIFO size ", requested,
                   " from ", source, " must be a power of two in [1, ", kMaxSize, "]");
  return static_cast<uint64_t>(requested);
}

Fifo::Fifo(int cudaDevice, uint64_t size) : size_(validatedSize(static_cast<int64_t>(size), "ProxyService")) {
  CudaDeviceGuard guard(cudaDevice);
  const size_t ringBytes = size_ * sizeof(ProxyTrigger);
  host_ = HostMappedBuffer(ringBytes + 2 * kLine);  // zeroed: meta parity 0 never matches lap 0's parity 1
  device_ = GpuBuffer(5 * kLine);                   // zeroed: head, both mirrors and both stamps start at 0
  char* base = static_cast<char*>(host_.host());
  ring_ = reinterpret_cast<ProxyTrigger*>(base + kRingOffset);
  tail_ = reinterpret_cast<uint64_t*>(base + ringBytes);
  flushed_ = reinterpret_cast<uint64_t*>(base + ringBytes + kLine);
}

bool Fifo::tryRead(uint64_t position, ProxyTrigger* out) const {
  const ProxyTrigger* slot = ring_ + (position & (size_ - 1));
  const uint64_t meta = __atomic_load_n(&slot->meta, __ATOMIC_ACQUIRE);
  if (!triggerReady(meta, position, size_)) return false;
  // Ordered after the acquire above; volatile keeps the compiler from caching a previous lap's values.
  const volatile ProxyTrigger* v = slot;
  out->srcOffset = v->srcOffset;
  out->dstOffset = v->dstOffset;
  out->bytes = v->bytes;
  out->meta = meta;
  return true;
}

void Fifo::publishTail(uint64_t tail) const {
  __atomic_store_n(tail_, tail, __ATOMIC_RELEASE);
}

void Fifo::publishFlushed(uint64_t flushed) const {
  __atomic_store_n(flushed_, flushed, __ATOMIC_RELEASE);
}

FifoDeviceHandle Fifo::deviceHandle(const SpinContext& spin) const {
  char* hostDevice = static_cast<char*>(host_.device());
  char* dev = static_cast<char*>(device_.data());
  const size_t ringBytes = size_ * sizeof(ProxyTrigger);
  FifoDeviceHandle h{};
  h.triggers = reinterpret_cast<ProxyTrigger*>(hostDevice + kRingOffset);
  auto line = [&](int i) { return reinterpret_cast<uint64_t*>(dev + i * kLine); };
  h.head = line(0);
  h.tail = {reinterpret_cast<uint64_t*>(hostDevice + ringBytes), line(1), line(2)};
  h.flushed = {reinterpret_cast<uint64_t*>(hostDevice + ringBytes + kLine), line(3), line(4)};
  h.size = size_;
  h.spin = spin;
  return h;
}

}  // namespace meshcomm::internal
