// LowLatencyBuffer's kernels (low_latency_kernels.cu): meshcomm::ep::ll::dispatch and ::combine, each one
// kernel symbol with a runtime phase (DeepEP's low-latency test finds the kernels by these names).
#pragma once

#include <cuda_runtime.h>

#include "ep/low_latency_region.hpp"

namespace meshcomm::ep::ll {

constexpr int kThreads = 512;

void launchDispatch(const LowLatencyView& v, const LowLatencyDispatchArgs& a, const LowLatencyShape& s,
                    int phase, int blocks, cudaStream_t stream);
void launchCombine(const LowLatencyView& v, const LowLatencyCombineArgs& a, const LowLatencyShape& s,
                   int phase, int blocks, cudaStream_t stream);

}  // namespace meshcomm::ep::ll
