// torch dtype and ReduceOp → meshcomm (see dtypes.hpp).
#include "dtypes.hpp"

#include <c10/util/Exception.h>

namespace meshcomm::torch_backend {

namespace {

bool isComplex(at::ScalarType t) {
  return t == at::kComplexFloat || t == at::kComplexDouble;
}

// The real view of a complex tensor (two reals per element), or the tensor itself.
at::Tensor realView(const at::Tensor& t) {
  return isComplex(t.scalar_type()) ? at::view_as_real(t) : t;
}

using Kind = ReduceRequest::Kind;

ReduceOp baseOp(const OpContext& ctx, Kind kind, at::ScalarType type) {
  const bool isBool = type == at::kBool;
  switch (kind) {
    case Kind::Sum:
      return isBool ? ReduceOp::Max : ReduceOp::Sum;
    case Kind::Product:
      return isBool ? ReduceOp::Min : ReduceOp::Prod;
    case Kind::Min:
      return ReduceOp::Min;
    case Kind::Max:
      return ReduceOp::Max;
    case Kind::Avg:
      TORCH_CHECK(!isBool, "meshcomm: rank ", ctx.rank, ": ", ctx.op,
                  ": op: AVG is not defined for torch.bool (use SUM or MAX)");
      return ReduceOp::Avg;
    case Kind::BitwiseAnd:
    case Kind::BitwiseOr:
    case Kind::BitwiseXor:
      TORCH_CHECK(false, "meshcomm: rank ", ctx.rank, ": ", ctx.op,
                  ": op: bitwise reductions (BAND/BOR/BXOR) are not supported");
    case Kind::PreMulSum:
      break;
  }
  TORCH_CHECK(false, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": op: unsupported reduce op ",
              static_cast<int>(kind));
}

ReduceOpSpec preMulSum(const OpContext& ctx, const ReduceRequest& op, const at::Tensor& t,
                       at::Tensor& keepAlive) {
  TORCH_CHECK(op.scalarFactor.has_value() || op.tensorFactor.defined(), "meshcomm: rank ", ctx.rank, ": ",
              ctx.op, ": op: PREMUL_SUM without a factor");
  TORCH_CHECK(!isComplex(t.scalar_type()) || !op.tensorFactor.defined(), "meshcomm: rank ", ctx.rank, ": ",
              ctx.op, ": op: PREMUL_SUM with a tensor factor is not supported for complex tensors");
  if (!op.tensorFactor.defined()) return ReduceOpSpec::preMulSum(*op.scalarFactor);
  const at::Tensor& factor = op.tensorFactor;
  TORCH_CHECK(factor.numel() == 1, "meshcomm: rank ", ctx.rank, ": ", ctx.op,
              ": op: PREMUL_SUM factor tensor has ", factor.numel(), " elements, expected 1");
  if (factor.device() == t.device() && factor.scalar_type() == t.scalar_type() && factor.is_contiguous()) {
    keepAlive = factor;
  } else {
    // Converted on the current stream (the op stream waits on it): a copy from the host is not graph-safe.
    keepAlive = factor.to(t.device(), t.scalar_type()).contiguous();
  }
  return ReduceOpSpec::preMulSumDevice(keepAlive.data_ptr());
}

// c10d's rule (isComplexViewAsRealAllowed): the ops that act elementwise on the real view.
bool complexAllowed(Kind kind) {
  return kind == Kind::Sum || kind == Kind::Avg || kind == Kind::PreMulSum;
}

}  // namespace

std::optional<DataType> meshcommType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DataType::F32;
    case at::kHalf:
      return DataType::F16;
    case at::kBFloat16:
      return DataType::BF16;
    case at::kDouble:
      return DataType::F64;
    case at::kChar:
      return DataType::I8;
    case at::kByte:
    case at::kBool:
      return DataType::U8;
    case at::kInt:
      return DataType::I32;
    case at::kUInt32:
      return DataType::U32;
    case at::kLong:
      return DataType::I64;
    case at::kUInt64:
      return DataType::U64;
    case at::kFloat8_e4m3fn:
      return DataType::F8E4M3;
    case at::kFloat8_e5m2:
      return DataType::F8E5M2;
    default:
      return std::nullopt;
  }
}

Elements movementView(const at::Tensor& t) {
  if (auto dtype = meshcommType(t.scalar_type())) {
    return {t.data_ptr(), static_cast<size_t>(t.numel()), *dtype};
  }
  return {t.data_ptr(), static_cast<size_t>(t.nbytes()), DataType::U8};
}

Elements reductionElements(const at::Tensor& t) {
  const at::Tensor view = realView(t);
  auto dtype = meshcommType(view.scalar_type());
  TORCH_CHECK(dtype.has_value(), "meshcomm: reductions: dtype ", t.scalar_type(), " has no meshcomm type");
  return {view.data_ptr(), static_cast<size_t>(view.numel()), *dtype};
}

Reduction reductionView(const OpContext& ctx, const at::Tensor& t, const ReduceRequest& op) {
  const at::ScalarType type = t.scalar_type();
  TORCH_CHECK(
      meshcommType(realView(t).scalar_type()).has_value(), "meshcomm: rank ", ctx.rank, ": ", ctx.op,
      ": tensor: dtype ", type,
      " cannot be reduced (supported: float32/16/64, bfloat16, fp8 e4m3fn/e5m2, int8/32/64, uint8/32/64, "
      "bool, complex64/128)");
  if (isComplex(type)) {
    TORCH_CHECK(complexAllowed(op.kind), "meshcomm: rank ", ctx.rank, ": ", ctx.op,
                ": op: only SUM, AVG and PREMUL_SUM reduce complex tensors");
  }
  Reduction r;
  r.elements = reductionElements(t);
  if (op.kind == Kind::PreMulSum) {
    r.op = preMulSum(ctx, op, t, r.keepAlive);
  } else {
    r.op = ReduceOpSpec(baseOp(ctx, op.kind, type));
  }
  return r;
}

}  // namespace meshcomm::torch_backend
