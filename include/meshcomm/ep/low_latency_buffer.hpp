// LowLatencyBuffer: DeepEP's low-latency dispatch and combine over NVLink stores alone (docs/ep.md,
// "Low-latency mode"). A fixed maximum of M tokens per rank; dispatch delivers every (token, expert) pair
// into an expert-major layout [E/R][R*M][H] (rows by source rank, then source token), BF16 or cast to FP8 in
// the kernel (per 128 channels); combine sends each expert's rows back and the owner sums them weighted by
// its top-k weights. Each op is one kernel with a send and a receive phase, launched together or apart (the
// receive as DeepEP's recv hook). Epochs in device memory tag every flag, so nothing is cleaned between calls
// and captured graphs replay; two halves of the region alternate by epoch, and a sender waits for the
// receiver's credit for the half it reuses, so at most two dispatches (and two combines) may await their
// receive phase.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "meshcomm/comm.hpp"

namespace meshcomm::ep {

struct LowLatencyShape {
  int maxTokens = 0;   // M: tokens per rank at most (every rank alike)
  int hidden = 0;      // H: elements per token row, a multiple of 128 (of 512 with UE8M0 scales)
  int numExperts = 0;  // E: a multiple of the rank count, at most kMaxExperts
  int topk = 0;        // K: 1 to 32
};

enum LowLatencyPhase : int { kLowLatencySend = 1, kLowLatencyReceive = 2, kLowLatencyBoth = 3 };

struct LowLatencyDispatchArgs {
  int tokens = 0;                    // T <= M
  const void* x = nullptr;           // [T][H] bf16
  const int64_t* topkIdx = nullptr;  // [T][K], -1: none
  bool fp8 = true;                   // cast to FP8 e4m3 with one fp32 scale per 128 channels
  bool roundScale = false;           // scales rounded up to powers of two
  bool ue8m0 = false;                // scales as UE8M0 bytes, 4 packed per int32 (needs roundScale)
  // Outputs (device memory), El = E / R local experts, RM = R * M rows per expert:
  void* recvX = nullptr;                   // [El][RM][H] fp8 or bf16
  void* recvScales = nullptr;              // fp8: [El][H/128][RM] f32, or [El][H/512][RM] i32 (UE8M0)
  int32_t* recvCount = nullptr;            // [El]
  int32_t* srcInfo = nullptr;              // [El][RM]: the row's token index on its source rank
  int64_t* layoutRange = nullptr;          // [El][R]: begin << 32 | count of each source's rows
  int32_t* cumulativeRecvStats = nullptr;  // [El] or null: += recvCount
  int64_t* waitRecvCostStats = nullptr;    // [R] or null: += clock cycles waited for each source
};

struct LowLatencyCombineArgs {
  const void* y = nullptr;               // [El][RM][H] bf16 (dispatch's layout), or null: combineSource()
  const int32_t* srcInfo = nullptr;      // the dispatch's
  const int64_t* layoutRange = nullptr;  // the dispatch's
  int tokens = 0;                        // this rank's T, as in its dispatch
  const int64_t* topkIdx = nullptr;      // [T][K]
  const float* topkWeights = nullptr;    // [T][K]
  void* out = nullptr;                   // [T][H] bf16: sum over k of weight * expert output
  int64_t* waitRecvCostStats = nullptr;  // [R] or null
};

class LowLatencyBuffer {
 public:
  // Collective over `comm`: registers `bytes` on every rank (the same everywhere) and maps every peer's.
  // `blocks` is every kernel's launch size (the same everywhere; at most the GPU's multiprocessors).
  LowLatencyBuffer(Comm& comm, size_t bytes, int blocks = 32);
  ~LowLatencyBuffer();
  LowLatencyBuffer(const LowLatencyBuffer&) = delete;
  LowLatencyBuffer& operator=(const LowLatencyBuffer&) = delete;

  // The region size `shape` needs on `ranks` ranks (DeepEP's get_low_latency_rdma_size_hint).
  static size_t bytesFor(int maxTokens, int hidden, int ranks, int numExperts);

  // The phases named by `phases`. A send returns its ticket; a receive alone takes the ticket of its send
  // (launch it on the send's stream). At most two calls may await their receive, in either order; a third
  // send is refused until the first one's receive was launched. Sends of one op run in order on the device.
  uint64_t dispatch(const LowLatencyDispatchArgs& args, const LowLatencyShape& shape, int phases,
                    uint64_t ticket, cudaStream_t stream);
  uint64_t combine(const LowLatencyCombineArgs& args, const LowLatencyShape& shape, int phases,
                   uint64_t ticket, cudaStream_t stream);

  // The zero-copy combine source [El][R*M][H] bf16 for `shape` (allocated on first use: not while capturing).
  void* combineSource(const LowLatencyShape& shape);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshcomm::ep
