// torchcomms ReduceOp → ReduceRequest (see reduce_op.hpp).
#include "reduce_op.hpp"

#include <variant>

namespace meshcomm::torch_backend {

ReduceRequest reduceRequest(const torch::comms::ReduceOp& op) {
  using Type = torch::comms::ReduceOp::RedOpType;
  using Kind = ReduceRequest::Kind;
  ReduceRequest r;
  switch (op.type()) {
    case Type::SUM:
      r.kind = Kind::Sum;
      break;
    case Type::PRODUCT:
      r.kind = Kind::Product;
      break;
    case Type::MIN:
      r.kind = Kind::Min;
      break;
    case Type::MAX:
      r.kind = Kind::Max;
      break;
    case Type::AVG:
      r.kind = Kind::Avg;
      break;
    case Type::BAND:
      r.kind = Kind::BitwiseAnd;
      break;
    case Type::BOR:
      r.kind = Kind::BitwiseOr;
      break;
    case Type::BXOR:
      r.kind = Kind::BitwiseXor;
      break;
    case Type::PREMUL_SUM:
      r.kind = Kind::PreMulSum;
      if (op.factor().has_value()) {
        const torch::comms::PreMulSumFactorT& factor = *op.factor();
        if (const auto* t = std::get_if<at::Tensor>(&factor)) {
          r.tensorFactor = *t;
        } else {
          r.scalarFactor = std::get<double>(factor);
        }
      }
      break;
  }
  return r;
}

}  // namespace meshcomm::torch_backend
