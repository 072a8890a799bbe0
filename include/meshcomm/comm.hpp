// Comm: the collective API on raw device pointers and a cudaStream_t. Built collectively on top of a
// Communicator; owns the shared CommResources, the algorithm collection and the selector. Every call
// validates its arguments (errors name rank, operation and argument), selects an algorithm and enqueues
// it: no host synchronisation or allocation on the steady path, so every call can be captured in a CUDA
// graph. Device-side failures (a peer that stopped) surface through checkError() and on the next call.
// The typed calls are CollectiveArgs built for launch(args); check() and launch(CheckedCall) split that
// path in two for callers that validate at the call and launch later (the NCCL shim's groups).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "meshcomm/algorithm.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/selector.hpp"
#include "meshcomm/types.hpp"

namespace meshcomm {

struct CommConfig {
  int cudaDevice = -1;  // -1: the current device
  CommResourcesConfig resources;
};

class Comm;

// A call validated by Comm::check or Comm::checkP2P: that Comm's launch(CheckedCall) runs it without
// validating it again. Only a Comm makes one; it holds a copy of the arguments.
class CheckedCall {
 public:
  const CollectiveArgs& args() const { return args_; }
  // A send or receive (args().collective is SendRecv): p2p() is the operation, its count in elements of
  // args().dtype.
  bool isP2P() const { return args_.collective == Collective::SendRecv; }
  const P2POp& p2p() const { return p2p_; }

 private:
  friend class Comm;
  CheckedCall(const Comm* comm, const CollectiveArgs& args, const P2POp& p2p)
      : comm_(comm), args_(args), p2p_(p2p) {}
  const Comm* comm_;
  CollectiveArgs args_;
  P2POp p2p_;
};

class Comm {
 public:
  // Collective: every rank constructs its Comm with the same bootstrap group.
  explicit Comm(std::shared_ptr<Bootstrap> bootstrap, const CommConfig& config = {});
  // TcpBootstrap::fromEnvironment(); device = LOCAL_RANK unless config says otherwise.
  static std::unique_ptr<Comm> fromEnvironment(CommConfig config = {});
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;
  int size() const;
  int cudaDevice() const;
  Communicator& communicator() const;
  CommResources& resources() const;

  void allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOpSpec op,
                 cudaStream_t stream);
  // recv holds size()*sendCount elements; in place when send == recv + rank*sendCount.
  void allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream);
  // send holds size()*recvCount elements; in place when recv == send + rank*recvCount.
  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOpSpec op,
                     cudaStream_t stream);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root, cudaStream_t stream);
  // recv is used on the root only (may be null elsewhere).
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOpSpec op, int root,
              cudaStream_t stream);
  // recv (size()*sendCount elements) on the root only.
  void gather(const void* send, void* recv, size_t sendCount, DataType dtype, int root, cudaStream_t stream);
  // send (size()*recvCount elements) on the root only.
  void scatter(const void* send, void* recv, size_t recvCount, DataType dtype, int root, cudaStream_t stream);
  // send and recv hold size()*countPerPeer elements.
  void allToAll(const void* send, void* recv, size_t countPerPeer, DataType dtype, cudaStream_t stream);
  // Counts and displacements (elements, size() entries each) on the host or in device memory of this GPU
  // (no host synchronisation either way; device arrays may change between calls and graph replays).
  void allToAllv(const void* send, const size_t* sendCounts, const size_t* sendDispls, void* recv,
                 const size_t* recvCounts, const size_t* recvDispls, DataType dtype, cudaStream_t stream,
                 CountsLocation where = CountsLocation::Host);
  // Point-to-point. Outside a group each call runs alone; between groupStart() and groupEnd() sends and
  // receives are collected and groupEnd() launches them as one kernel (all on the stream of the group's
  // first operation; every operation of a group must use the same stream). A send that reads bytes an
  // earlier receive of the group writes sees them where every peer's operations fall on one side of it
  // (the group then runs as consecutive launches); otherwise, as in NCCL, the group's operations run
  // concurrently and such a send's data is undefined (docs/collectives.md, "SendRecv").
  void send(const void* buffer, size_t count, DataType dtype, int peer, cudaStream_t stream);
  void recv(void* buffer, size_t count, DataType dtype, int peer, cudaStream_t stream);
  void groupStart();
  void groupEnd();
  // A device-side barrier of all ranks on `stream`.
  void barrier(cudaStream_t stream);

  // Runs any collective but SendRecv (that is send/recv) as its typed call does: launch(check(args)).
  void launch(const CollectiveArgs& args);
  // Validates a collective call (not SendRecv) with this Comm, as launch(args) does; launches nothing.
  CheckedCall check(const CollectiveArgs& args) const;
  // Validates one send or receive (p2p.count in elements of dtype), as send()/recv() do; launches nothing.
  CheckedCall checkP2P(const P2POp& p2p, DataType dtype, cudaStream_t stream) const;
  // Runs a call this Comm checked, without validating it again: a collective at once, a send or receive as
  // send()/recv() (collected while a group is open).
  void launch(const CheckedCall& call);

  // Registered buffers (collective: every rank, same order; not during graph capture). Registers this rank's
  // [buffer, buffer + bytes) of device memory on this GPU (cudaMalloc or cuMem, e.g. a torch tensor's
  // storage) and maps every peer's buffer of the same call. Collectives whose buffers lie inside
  // registrations may then run zero-copy algorithms (allreduce_zerocopy: loads and stores the peers' buffers
  // directly). A call on registered buffers must be on registered buffers on every rank (the offsets may
  // differ). deregisterBuffer waits for this GPU and for every peer before it unmaps.
  BufferRegistration registerBuffer(void* buffer, size_t bytes);
  void deregisterBuffer(BufferRegistration registration);

  // Throws the first device-side error of this communicator (Error(Timeout) naming rank, peer, op).
  void checkError() const;
  // Makes every device wait of this communicator give up (its kernels finish) and the destructor skip the
  // final agreement with the peers, which may be gone (ncclCommAbort). The Comm is unusable afterwards.
  void abort();
  // The first half of the collective teardown: drains this GPU and tells every peer this rank is done; the
  // destructor then only waits for the peers' word before it frees. A process that tears down several Comms
  // can call beginClose on all of them first, so the ranks need not destroy them in the same order (torch's
  // destroy_process_group does not). Launches afterwards throw Error(InvalidUsage); idempotent.
  void beginClose();

  AlgorithmCollection& algorithms();
  // Registers a user algorithm (collective: all ranks, same order) and calls its initialize().
  void addAlgorithm(std::shared_ptr<Algorithm> algorithm);
  // The selection table. Every rule must name a registered algorithm of its collective: setSelector throws
  // Error(InvalidUsage) naming the rule otherwise (the Comm keeps its table), and so does the next selection
  // after a change through selector(). To name an algorithm added with addAlgorithm, set the table after
  // adding it.
  Selector& selector();
  void setSelector(Selector selector);
  // What the selector picks for `args` (for tools and tests).
  Selection select(const CollectiveArgs& args) const;
  // Runs `args` with a named algorithm (tools/tuner); throws if it does not support the call.
  void run(const CollectiveArgs& args, const std::string& algorithm, LaunchConfig config = {});

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm
