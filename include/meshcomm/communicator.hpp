// Communicator: one per process and GPU. Owns the bootstrap, the registrations of this rank, the cache
// of peer mappings, the pool of semaphore tokens and the device error report. Calls marked (pair) must be
// matched by the named peer with the same tag; they exchange data through the bootstrap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/connection.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/registered_memory.hpp"

namespace meshcomm {

class Communicator {
 public:
  // `cudaDevice` < 0: the current device. The communicator uses that device for all its allocations.
  explicit Communicator(std::shared_ptr<Bootstrap> bootstrap, int cudaDevice = -1);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  Bootstrap& bootstrap() const;
  std::shared_ptr<Bootstrap> bootstrapPtr() const;
  int rank() const;
  int size() const;
  int cudaDevice() const;

  // Registers [ptr, ptr+bytes): device memory from cudaMalloc or cuMem (kind detected), or pinned host
  // memory. Error (naming rank and pointer) for memory of another device, pageable host memory or null.
  RegisteredMemory registerMemory(void* ptr, size_t bytes);

  // (pair) Describes `mem` to `peer`; the peer calls recvMemory(this rank, tag).
  void sendMemory(const RegisteredMemory& mem, int peer, int tag);
  // (pair) Receives a peer's description and maps it when it is device memory on this host reachable by
  // CUDA IPC (and MESHCOMM_TRANSPORT is not tcp).
  RegisteredMemory recvMemory(int peer, int tag);

  // The transport connect() uses for `peer`: CudaIpc on the same host unless MESHCOMM_TRANSPORT=tcp.
  Transport transportTo(int peer) const;
  // (pair) Connects to `peer`; both sides call connect(each other, tag).
  std::shared_ptr<Connection> connect(int peer, int tag);
  // (pair) As connect(peer, tag) over the given transport: Tcp reaches any peer (on this host too, which is
  // how a node boundary is emulated on one host); CudaIpc only a peer on this host. Both sides pass the same.
  std::shared_ptr<Connection> connect(int peer, int tag, Transport transport);

  // Device error report (host-mapped) and the spin context device handles embed for waits on `peer`.
  SpinContext spinContext(int peer) const;
  // Throws Error(Timeout) naming rank, peer and operation if a device wait of this process failed.
  void checkDeviceError() const;
  // Clears a reported device error (after the caller has handled it; all ranks must agree to continue).
  void clearDeviceError();
  // Raises the abort flag (no failure recorded): every device wait of this communicator returns false at
  // its next poll, so kernels finish (ncclCommAbort). checkDeviceError() then throws.
  void abortDeviceWaits();

  // Allocates one 8-byte semaphore token in this rank's token pool (device memory, zero) and returns the
  // pool registration and the token's offset in it. Tokens live as long as the communicator.
  struct Token {
    RegisteredMemory pool;
    uint64_t offset;
    uint64_t* devicePtr() const;
  };
  Token allocateToken();
  // As allocateToken, in pinned host memory the GPU reads through its mapping (zero). A TCP connection's
  // receiver thread sets such a token with a CPU store, queuing no GPU work, so a host-signalled semaphore
  // never waits behind the application's GPU work (streams beyond CUDA's hardware queues share them).
  Token allocateHostToken();
  // Allocates a zeroed 8-byte device-local counter (never shared).
  uint64_t* allocateCounter();

  class Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm
