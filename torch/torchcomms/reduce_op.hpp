// torchcomms' ReduceOp as the shared ReduceRequest (common/dtypes.hpp): PREMUL_SUM carries its factor, a
// double or a one-element tensor.
#pragma once

#include <comms/torchcomms/TorchCommTypes.hpp>

#include "dtypes.hpp"

namespace meshcomm::torch_backend {

ReduceRequest reduceRequest(const torch::comms::ReduceOp& op);

}  // namespace meshcomm::torch_backend
