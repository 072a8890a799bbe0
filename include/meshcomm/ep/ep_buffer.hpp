// EpBuffer: expert-parallel dispatch and combine over NVLink inside a node and PortChannels between nodes
// (docs/ep.md). Every rank of a Comm owns one registered device region that every node peer maps; dispatch
// writes each token once, straight to its final row in each destination's region (rows by source rank, then
// source token: DeepEP's order), after an epoch-tagged LL exchange of the token counts that also tells a
// sender that the destination has finished with the region's previous contents; combine writes each expert
// output row back into the source's per-sender slab, indexed by token, and the source sums its rows per
// token. Across nodes the rows are staged and put over the network (docs/ep.md, "Internode").
//
// A dispatch is three calls: dispatchSend (counts, then rows; returns at once), optionally waitReceiveCounts
// (the host learns this rank's row count, e.g. to size its outputs), and dispatchReceive (copies every peer's
// rows out as they arrive). dispatchReceive may run on a second stream beside dispatchSend (ordered after
// what precedes the send), to overlap its copy with the sends; the caller then orders later work after both,
// and the next dispatch's send after this receive. Every rank makes the same calls with the same Shape and
// launch size; the epochs live in device memory, so captured CUDA graphs replay correctly (then size the
// outputs for the worst case and skip waitReceiveCounts). Device-side failures (a receive that does not fit
// the region, a peer that never arrives) are reported through Comm::checkError.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "meshcomm/comm.hpp"

namespace meshcomm::ep {

// What every rank passes alike for one dispatch/combine.
struct Shape {
  int hiddenBytes = 0;  // bytes of one token row; a positive multiple of 16
  int scales = 0;       // fp32 scales per token carried with the row (0: none)
  int topk = 0;         // top-k entries per token (0: dispatch without top-k)
  int numExperts = 0;   // a multiple of the rank count; at most kMaxExperts
};

constexpr int kMaxExperts = 1024;
constexpr int kMaxRanks = 8;

// get_dispatch_layout's outputs (device memory, overwritten).
struct LayoutOutputs {
  int* tokensPerRank = nullptr;    // [R]: tokens with at least one expert on each rank
  int* tokensPerExpert = nullptr;  // [numExperts]
  bool* tokenInRank = nullptr;     // [tokens][R]
};

struct DispatchInputs {
  int tokens = 0;
  const void* x = nullptr;               // [tokens][hiddenBytes]
  const float* scales = nullptr;         // [tokens][shape.scales], or null when shape.scales == 0
  const int64_t* topkIdx = nullptr;      // [tokens][topk] (-1: none), or null when shape.topk == 0
  const float* topkWeights = nullptr;    // [tokens][topk], may be null
  const bool* tokenInRank = nullptr;     // [tokens][R] (layout)
  const int* tokensPerRank = nullptr;    // [R] (layout)
  const int* tokensPerExpert = nullptr;  // [numExperts] (layout; may be null without top-k)
  int expertAlignment = 1;               // per-expert receive counts are rounded up to this
};

// The receive side (device memory): rows ordered by (source rank, source token). `capacityRows` rows are
// written: the received ones, then (when there is room) topkIdx -1 and weights 0 in the rest.
struct DispatchOutputs {
  int64_t capacityRows = 0;
  void* x = nullptr;             // [capacityRows][hiddenBytes]
  float* scales = nullptr;       // [capacityRows][shape.scales] or null
  int64_t* topkIdx = nullptr;    // [capacityRows][topk]: this rank's local expert ids, -1 elsewhere; or null
  float* topkWeights = nullptr;  // [capacityRows][topk] (0 where topkIdx is -1) or null
  int* srcIdx = nullptr;         // [capacityRows]: the row's token index on its source rank
  int* rankPrefix = nullptr;     // [R][R]: [i][j] = rows rank j receives from ranks 0..i (inclusive)
  int* receivedRows = nullptr;   // [1]: rows this rank received (may be null)
};

// What the host learns from waitReceiveCounts.
struct ReceiveCounts {
  int64_t rows = 0;
  std::vector<int> perLocalExpert;  // numExperts / R entries, each rounded up to the expert alignment
};

struct CombineInputs {
  int rows = 0;                        // rows of y: the dispatch's output rows (only the received ones count)
  const void* y = nullptr;             // [rows][hiddenBytes] bf16, in dispatch receive order
  const float* topkWeights = nullptr;  // [rows][topk] or null
  const int* srcIdx = nullptr;         // [rows] (dispatch's srcIdx)
  const int* rankPrefix = nullptr;     // [R][R] (dispatch's rankPrefix)
  int tokens = 0;                      // this rank's tokens (as in its dispatch)
  const bool* tokenInRank = nullptr;   // [tokens][R] (its dispatch layout)
  const void* bias0 = nullptr;         // [tokens][hiddenBytes] bf16 or null
  const void* bias1 = nullptr;         // [tokens][hiddenBytes] bf16 or null
  // Across nodes (nodeSize() < size()): [tokens][R] device scratch the combine fills before its kernel (each
  // token's rank among this rank's tokens sent to each rank); unused, and may be null, inside one node.
  int32_t* tokenRowIndex = nullptr;
};

struct CombineOutputs {
  void* x = nullptr;             // [tokens][hiddenBytes] bf16: the sum over the ranks the token went to
  float* topkWeights = nullptr;  // [tokens][topk]: likewise, or null
};

class EpBuffer {
 public:
  // Collective over `comm`: registers `bytes` of device memory on every rank (the same size everywhere) and
  // maps every peer's. `blocks` is the launch size of the communicating kernels (the same everywhere; at
  // least 2 and at most the GPU's multiprocessors, so that every block is resident); a dispatch receives on
  // MESHCOMM_EP_RECEIVE_BLOCKS of them (0: max(1, blocks / 2)) and sends on the rest, both kernels side by
  // side. Across nodes (nodeSize() < size()) each rank also allocates a network region of `networkBytes` of
  // pinned host memory (0: `bytes`; the same everywhere) for the rows that cross the network.
  EpBuffer(Comm& comm, size_t bytes, int blocks = 24, size_t networkBytes = 0);
  ~EpBuffer();
  EpBuffer(const EpBuffer&) = delete;
  EpBuffer& operator=(const EpBuffer&) = delete;

  int rank() const;
  int size() const;
  size_t bytes() const;
  int blocks() const;
  // Ranks per node (docs/ep.md, "Internode"): the group's size inside one node; smaller when the group spans
  // nodes (MESHCOMM_EP_NODE_SIZE, or the bootstrap's host ids), whose ranks are then reached over the
  // network.
  int nodeSize() const;
  // This rank's data area (device memory): the rows dispatch receives into, then the combine slabs; the
  // protocol's counters and packets lie before it. What a dispatch or combine leaves there is overwritten
  // by the next one (DeepEP's get_local_buffer_tensor).
  void* localData() const;
  size_t localDataBytes() const;

  // Rows of `shape` a dispatch can receive, and tokens a combine can return, with this buffer.
  int64_t dispatchCapacity(const Shape& shape) const;
  int64_t combineCapacity(const Shape& shape) const;

  // Local: per token the ranks holding its experts (deduplicated), and the counts per rank and per expert.
  void layout(const int64_t* topkIdx, int tokens, const Shape& shape, const LayoutOutputs& out,
              cudaStream_t stream);

  void dispatchSend(const DispatchInputs& in, const Shape& shape, cudaStream_t stream);
  // Blocks the host until the last dispatchSend has learnt this rank's counts (not during graph capture).
  ReceiveCounts waitReceiveCounts(double timeoutSec = 100.0);
  void dispatchReceive(const DispatchOutputs& out, const Shape& shape, cudaStream_t stream);

  // `shape.hiddenBytes` is the bf16 row of y and of the output.
  void combine(const CombineInputs& in, const Shape& shape, const CombineOutputs& out, cudaStream_t stream);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm::ep
