// The algorithm framework: a collective request, the Algorithm interface every implementation (built-in
// or user) provides, and the collection they register in. Selection is table-driven (selector.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshcomm/types.hpp"

namespace meshcomm {

class CommResources;

enum class Collective : uint8_t {
  AllReduce = 0,
  AllGather = 1,
  ReduceScatter = 2,
  Broadcast = 3,
  Reduce = 4,
  Gather = 5,
  Scatter = 6,
  AllToAll = 7,
  AllToAllv = 8,
  SendRecv = 9,  // a group of point-to-point sends and receives run as one launch
  Barrier = 10,
};
constexpr int kNumCollectives = 11;
const char* collectiveName(Collective c);  // "allreduce", "allgather", "reduce_scatter", ...
// True where each rank sees its own message size (alltoallv, sendrecv): selection for such a collective must
// not depend on size, or ranks could pick different algorithms or launch configurations for one call.
bool sizeIsRankLocal(Collective c);

// One point-to-point operation of a SendRecv group.
struct P2POp {
  enum Kind : uint8_t { Send, Recv } kind;
  int peer;
  void* buffer;  // const for sends
  size_t count;
};

// Where allToAllv's counts and displacements live.
enum class CountsLocation : uint8_t { Host, Device };

// Where a call's buffer lies in the buffers registered with Comm::registerBuffer (buffer_registry.hpp):
// registration index (the same on every rank for the same registration) and byte offset in it; index -1:
// not registered. Rank-local: peers learn each other's spans on the device.
struct RegisteredSpan {
  int32_t index = -1;
  uint64_t offset = 0;
  bool registered() const { return index >= 0; }
};

// Everything an algorithm needs to run one call. Counts are in elements of `dtype`:
//   allreduce, broadcast, reduce: elements per rank;  allgather, gather: elements each rank contributes;
//   reduce_scatter, scatter: elements each rank receives;  alltoall: elements per peer;
//   alltoallv: per-peer counts/displacements arrays (nRanks each, elements).
struct CollectiveArgs {
  Collective collective = Collective::AllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DataType dtype = DataType::F32;
  ReduceOpSpec op;
  int root = 0;
  // alltoallv
  const size_t* sendCounts = nullptr;
  const size_t* sendDispls = nullptr;
  const size_t* recvCounts = nullptr;
  const size_t* recvDispls = nullptr;
  CountsLocation countsLocation = CountsLocation::Host;
  // send/recv group
  const P2POp* p2pOps = nullptr;
  size_t numP2POps = 0;

  // Registered-buffer spans of input and output (set by Comm for allreduce; unregistered otherwise).
  RegisteredSpan inputSpan;
  RegisteredSpan outputSpan;

  cudaStream_t stream = nullptr;
  bool capturing = false;  // the stream is being captured into a CUDA graph (set by Comm)

  // A call of a collective with a count (not alltoallv, sendrecv or barrier); `op` for reductions, `root`
  // for rooted collectives.
  static CollectiveArgs of(Collective collective, const void* input, void* output, size_t count,
                           DataType dtype, cudaStream_t stream, ReduceOpSpec op = {}, int root = 0) {
    CollectiveArgs a;
    a.collective = collective;
    a.input = input;
    a.output = output;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    a.root = root;
    a.stream = stream;
    return a;
  }

  // nccl-tests "size": the larger of the bytes one rank sends or receives (alltoallv: the host-side max
  // where known, else the output capacity the caller declared through recvCounts when on the host).
  size_t messageBytes(int nRanks) const;
  // Input and output are the same buffer (allgather: input == output + rank*count; reduce_scatter:
  // output == input + rank*count).
  bool inPlace(int rank) const;
};

// Block/thread counts of a launch; 0 = the algorithm's default.
struct LaunchConfig {
  int nBlocks = 0;
  int nThreadsPerBlock = 0;
};

// Facts about the communicator that decide which algorithms apply.
struct CommTopology {
  int rank = 0;
  int nRanks = 1;
  int nRanksPerNode = 1;
  bool allPeersIpc = true;  // every peer reachable by CUDA IPC (MemoryChannels possible)
  int smCount = 0;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual std::string name() const = 0;
  virtual Collective collective() const = 0;

  // Called once per communicator, collectively (every rank registers the same algorithms in the same
  // order): reserve scratch/packet regions and device state from `resources`.
  virtual void initialize(CommResources& resources) {}

  // Empty if the algorithm can run `args` on `topo`, else the reason (shown when it is forced and cannot).
  virtual std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const = 0;
  virtual LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const = 0;

  // Per-buffer contexts (zero-copy on registered buffers). An empty key means the algorithm runs on the
  // shared resources only. A non-empty key must be the same on every rank for the same call; a miss
  // builds the context collectively (never during graph capture: the call fails with "warm up before
  // capture").
  virtual std::string contextKey(const CollectiveArgs& args) const { return {}; }
  virtual std::shared_ptr<void> buildContext(CommResources& resources, const CollectiveArgs& args) {
    return {};
  }

  // Enqueues the collective on args.stream: no host synchronisation, no allocation.
  virtual void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
                      void* context) = 0;
};

class AlgorithmCollection {
 public:
  // Names are unique; adding a second algorithm with an existing name throws.
  void add(std::shared_ptr<Algorithm> algorithm);
  // Throws what add() would throw for `algorithm` (null, empty name, name taken); adds nothing.
  void checkAddable(const Algorithm* algorithm) const;
  std::shared_ptr<Algorithm> find(const std::string& name) const;  // null if absent
  // In registration order (the fallback preference order of the selector).
  std::vector<std::shared_ptr<Algorithm>> forCollective(Collective c) const;
  const std::vector<std::shared_ptr<Algorithm>>& all() const { return algorithms_; }

 private:
  std::vector<std::shared_ptr<Algorithm>> algorithms_;
};

}  // namespace meshcomm
