// Host side of the GPU -> proxy FIFO (device side: include/meshcomm/device/fifo_device.hpp).
//
// Memory layout:
//   host-mapped (pinned, written by the GPU over PCIe, read by the proxy):
//     [ring: size x 32-byte ProxyTrigger][tail word, own cache line][flushed word, own cache line]
//   device memory (touched by the GPU only): [head][tail mirror][tail stamp][flushed mirror][flushed stamp],
//   a cache line each (HostCounterMirror: one claimed read of a host word per interval per GPU)
// The proxy alone writes tail and flushed (release stores); the GPU reads them with system-scope acquires.
#pragma once

#include <cstdint>

#include "meshcomm/device/fifo_device.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm::internal {

class Fifo {
 public:
  // Largest accepted size: 2^20 slots (32 MiB of pinned memory).
  static constexpr uint64_t kMaxSize = uint64_t{1} << 20;

  // `size` must be a power of two in [1, kMaxSize]. Allocates on `cudaDevice`.
  Fifo(int cudaDevice, uint64_t size);

  // Returns `requested` if it is a valid FIFO size, else throws Error(InvalidUsage) naming `source` (e.g.
  // "MESHCOMM_FIFO_SIZE") and the allowed range.
  static uint64_t validatedSize(int64_t requested, const char* source);

  uint64_t size() const { return size_; }

  // Copies the trigger at `position` into *out if the GPU has published it (its lap parity matches).
  // Acquire: the payload words read after the meta word are the ones the GPU wrote before publishing it.
  bool tryRead(uint64_t position, ProxyTrigger* out) const;
  // Release stores to the host-mapped words the GPU waits on.
  void publishTail(uint64_t tail) const;
  void publishFlushed(uint64_t flushed) const;

  // The device view, with `spin` as the timeout context of its waits (FIFO full, flush).
  FifoDeviceHandle deviceHandle(const SpinContext& spin) const;

 private:
  static constexpr size_t kLine = 64;

  uint64_t size_;
  HostMappedBuffer host_;
  GpuBuffer device_;
  ProxyTrigger* ring_ = nullptr;  // host view of the ring
  uint64_t* tail_ = nullptr;      // host view
  uint64_t* flushed_ = nullptr;   // host view
};

}  // namespace meshcomm::internal
