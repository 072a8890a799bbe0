// Exchanges that both faces express the same way on a meshcomm Comm.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtypes.hpp"
#include "meshcomm/comm.hpp"

namespace meshcomm::torch_backend {

// all_to_all of tensor lists: one meshcomm send/recv group (one kernel) for the peers' parts, a copy for
// this rank's own part (on the current stream, which must be `stream`).
void exchangeLists(Comm& comm, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                   cudaStream_t stream);

// Runs `ops(comm)` — sends and receives — as one meshcomm group; the group is closed on an exception too.
template <typename Ops>
void asGroup(Comm& comm, Ops&& ops) {
  comm.groupStart();
  try {
    ops(comm);
  } catch (...) {
    comm.groupEnd();
    throw;
  }
  comm.groupEnd();
}

// Split sizes (rows of dim 0 per rank, one per rank, or none for equal parts) → element counts and
// displacements of meshcomm's alltoallv over `t` (whose movementView has `viewCount` elements). Throws
// c10::Error naming rank, op and argument for a wrong number of splits, a negative split or a sum that is
// not the tensor's rows.
template <typename Split>
void splitsToCounts(const OpContext& ctx, const char* argument, const std::vector<Split>& splits,
                    const at::Tensor& t, size_t viewCount, int size, std::vector<size_t>& counts,
                    std::vector<size_t>& displs);

}  // namespace meshcomm::torch_backend
