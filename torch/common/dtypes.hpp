// Conversion of torch tensors and reduce ops to the meshcomm element view a Comm call takes. Data movement
// (allgather, broadcast, alltoall, send/recv, ...) works on any dtype: a dtype meshcomm has no type for moves
// as bytes. Reductions need a meshcomm type: bool reduces as uint8 with SUM→MAX and PRODUCT→MIN (as
// ProcessGroupNCCL), complex SUM/AVG/PREMUL_SUM reduce the real view, anything else is an error. The reduce
// op comes as a ReduceRequest, which each face builds from its own ReduceOp type (c10d's, torchcomms').
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <optional>

#include "meshcomm/types.hpp"

namespace meshcomm::torch_backend {

// The meshcomm type of a torch dtype with the same element layout, if any (bool → uint8).
std::optional<DataType> meshcommType(at::ScalarType type);

// What one Comm call sees of a tensor: its data pointer, element count and meshcomm dtype.
struct Elements {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::U8;
};

// For data movement: the tensor's own type, or its bytes.
Elements movementView(const at::Tensor& t);

// Where an error message comes from: "rank R: op".
struct OpContext {
  int rank;
  const char* op;
};

// A reduce op as the faces name it. PREMUL_SUM carries a host factor or a one-element tensor factor.
struct ReduceRequest {
  enum class Kind { Sum, Product, Min, Max, Avg, PreMulSum, BitwiseAnd, BitwiseOr, BitwiseXor };
  Kind kind = Kind::Sum;
  std::optional<double> scalarFactor;  // PreMulSum with a host factor
  at::Tensor tensorFactor;             // PreMulSum with a tensor factor (defined)
};

// A reduction: the elements to reduce and the meshcomm operator. `keepAlive` holds a device copy of a
// PREMUL_SUM tensor factor that had another dtype or device; it must live until the kernel has run.
struct Reduction {
  Elements elements;
  ReduceOpSpec op;
  at::Tensor keepAlive;
};

Reduction reductionView(const OpContext& ctx, const at::Tensor& t, const ReduceRequest& op);

// The same reduction applied to another tensor of the same dtype (reduce_scatter's output).
Elements reductionElements(const at::Tensor& t);

}  // namespace meshcomm::torch_backend
