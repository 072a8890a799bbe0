// c10d ReduceOp → ReduceRequest (see reduce_op.hpp).
#include "reduce_op.hpp"

#include <c10/util/Exception.h>

namespace meshcomm::torch_backend {

ReduceRequest reduceRequest(const OpContext& ctx, const ::c10d::ReduceOp& op) {
  using Kind = ReduceRequest::Kind;
  ReduceRequest r;
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      r.kind = Kind::Sum;
      break;
    case ::c10d::ReduceOp::PRODUCT:
      r.kind = Kind::Product;
      break;
    case ::c10d::ReduceOp::MIN:
      r.kind = Kind::Min;
      break;
    case ::c10d::ReduceOp::MAX:
      r.kind = Kind::Max;
      break;
    case ::c10d::ReduceOp::AVG:
      r.kind = Kind::Avg;
      break;
    case ::c10d::ReduceOp::BAND:
      r.kind = Kind::BitwiseAnd;
      break;
    case ::c10d::ReduceOp::BOR:
      r.kind = Kind::BitwiseOr;
      break;
    case ::c10d::ReduceOp::BXOR:
      r.kind = Kind::BitwiseXor;
      break;
    case ::c10d::ReduceOp::PREMUL_SUM: {
      r.kind = Kind::PreMulSum;
      auto* supplement = dynamic_cast<::c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(
          supplement != nullptr, "meshcomm: rank ", ctx.rank, ": ", ctx.op,
          ": op: PREMUL_SUM without a factor (create it with torch.distributed._make_nccl_premul_sum)");
      if (supplement->tensor_factor.defined()) {
        r.tensorFactor = supplement->tensor_factor;
      } else {
        r.scalarFactor = supplement->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK(false, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": op: unsupported ReduceOp value ",
                  static_cast<int>(op.op_));
  }
  return r;
}

Reduction reductionView(const OpContext& ctx, const at::Tensor& t, const ::c10d::ReduceOp& op) {
  return reductionView(ctx, t, reduceRequest(ctx, op));
}

}  // namespace meshcomm::torch_backend
