// Window: one-sided communication into the peers' memory over NVLink. Every rank of a Comm registers one
// device buffer (its window) in the same collective call; afterwards any rank can, on a CUDA stream and
// without the peer's participation, copy bytes into a peer's window (put), tell that peer its earlier writes
// are complete (signal) and wait for a peer's signal (waitSignal). The peers' windows are also mapped here,
// so a kernel (or a tensor view) can load from and store to them directly (peerData).
//
// Memory order: put is a weak copy; signal(peer) is a release at system scope that covers everything the
// stream did before it (earlier puts included); the k-th waitSignal(peer) on this rank returns, with acquire
// semantics, after peer's k-th signal(this rank). Counts live in device memory and advance on the device,
// so a captured CUDA graph replays them correctly. A wait gives up after MESHCOMM_DEVICE_TIMEOUT_MS and
// records a device error (Comm::checkError names rank, peer and operation).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "meshcomm/comm.hpp"

namespace meshcomm {

class Window {
 public:
  // Collective over `comm` (every rank, same order, not during graph capture): registers [base, base +
  // bytes) of this rank's device memory (cudaMalloc'd, e.g. a torch tensor's storage, or cuMem), maps every
  // peer's window and pairs a semaphore with each peer. `bytes` may differ between ranks (even 0).
  Window(Comm& comm, void* base, size_t bytes);
  // Collective: close() if it has not run (errors are logged, not thrown).
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  // Collective: waits for this GPU, agrees with every peer (bootstrap barrier) that nobody uses the windows
  // any more, then unmaps the peers' windows. Idempotent; the Window is unusable afterwards.
  void close();

  int rank() const;
  int size() const;
  void* data() const;    // this rank's window
  size_t bytes() const;  // its size
  // `peer`'s window as mapped on this GPU (this rank's own for peer == rank()) and its size.
  void* peerData(int peer) const;
  size_t peerBytes(int peer) const;

  // Copies `bytes` from `src` (memory this GPU can read) into peer's window at byte `dstOffset`, on
  // `stream`. Throws Error(InvalidUsage) naming rank, peer and range when it does not fit the peer's window.
  void put(const void* src, size_t bytes, int peer, size_t dstOffset, cudaStream_t stream);
  // Release to `peer` (peer == rank() signals this rank itself) on `stream`.
  void signal(int peer, cudaStream_t stream);
  // Acquire: `stream` waits for peer's next signal to this rank.
  void waitSignal(int peer, cudaStream_t stream);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm
