// c10d's ReduceOp as the shared ReduceRequest (common/dtypes.hpp): PREMUL_SUM's factor comes from the op's
// NCCLPreMulSumSupplement (torch.distributed._make_nccl_premul_sum).
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "dtypes.hpp"

namespace meshcomm::torch_backend {

ReduceRequest reduceRequest(const OpContext& ctx, const ::c10d::ReduceOp& op);

// reductionView (common/dtypes.hpp) of a c10d op.
Reduction reductionView(const OpContext& ctx, const at::Tensor& t, const ::c10d::ReduceOp& op);

}  // namespace meshcomm::torch_backend
