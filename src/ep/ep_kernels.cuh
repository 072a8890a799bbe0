// EpBuffer's kernels (ep_kernels.cu); ep_buffer.cc launches them. Memory-order contracts are stated at each
// kernel.
#pragma once

#include <cuda_runtime.h>

#include "ep/ep_region.hpp"

namespace meshcomm::ep::kernels {

constexpr int kThreads = 512;

void launchLayout(const int64_t* topkIdx, int tokens, const Shape& shape, int ranks, const SpinContext& spin,
                  const LayoutOutputs& out, cudaStream_t stream);
void launchDispatchSend(const KernelView& v, const DispatchInputs& in, const Shape& shape,
                        cudaStream_t stream);
// Advances an epoch counter (and its started-blocks counter) past `calls` calls of `blocks` blocks that never
// ran, on `stream`.
void launchSkipEpochs(uint64_t* epoch, uint64_t* started, uint64_t calls, int blocks, cudaStream_t stream);
// Across nodes: awaits `calls` rows signals from every other node's rank (of dispatches whose receive never
// ran), one thread per rank, on `stream` before the next dispatch's send.
void launchSkipNetworkSignals(const KernelView& v, uint64_t calls, cudaStream_t stream);
void launchDispatchReceive(const KernelView& v, const DispatchOutputs& out, const Shape& shape,
                           cudaStream_t stream);
// Across nodes, before launchCombine: index[t][r] = token t's rank among this rank's tokens sent to r.
void launchTokenRowIndex(const bool* tokenInRank, int tokens, int ranks, int32_t* index, cudaStream_t stream);
void launchCombine(const KernelView& v, const CombineInputs& in, const Shape& shape,
                   const CombineOutputs& out, cudaStream_t stream);

}  // namespace meshcomm::ep::kernels
