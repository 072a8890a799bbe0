// Argument validation of the Comm API (see validation.hpp).
#include "collectives/validation.hpp"

#include <cuda_runtime.h>

#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

[[noreturn]] void fail(const ValidationContext& ctx, const char* op, const char* argument,
                       const char* problem) {
  MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", ctx.rank, ": ", op, ": ", argument, ": ", problem);
}

void checkBuffer(const ValidationContext& ctx, const char* op, const char* argument, const void* ptr) {
  if (ptr == nullptr) fail(ctx, op, argument, "null pointer with a non-zero count");
  const PointerInfo info = ctx.pointers.query(ptr);
  if (const char* problem = bufferProblem(info, ctx.device)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", ctx.rank, ": ", op, ": ", argument, ": ", problem,
                   " (pointer ", ptr, ", communicator GPU ", ctx.device,
                   info.device >= 0 ? ", pointer GPU " : "",
                   info.device >= 0 ? std::to_string(info.device) : "", ")");
  }
}

void checkDataType(const ValidationContext& ctx, const char* op, DataType dtype) {
  if (static_cast<int>(dtype) >= kNumDataTypes) fail(ctx, op, "dtype", "not a DataType value");
}

void checkRoot(const ValidationContext& ctx, const char* op, int root) {
  if (root < 0 || root >= ctx.nRanks) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", ctx.rank, ": ", op, ": root: ", root,
                   " out of range [0, ", ctx.nRanks, ")");
  }
}

void checkReduceOp(const ValidationContext& ctx, const char* op, const ReduceOpSpec& spec) {
  if (static_cast<int>(spec.op) > static_cast<int>(ReduceOp::PreMulSum))
    fail(ctx, op, "op", "not a ReduceOp value");
  if (spec.op == ReduceOp::PreMulSum && spec.deviceScalar != nullptr) {
    checkBuffer(ctx, op, "op (PreMulSum device scalar)", spec.deviceScalar);
  }
}

bool isReduction(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

bool isRooted(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}

size_t hostSum(const size_t* counts, int n) {
  size_t s = 0;
  for (int i = 0; i < n; ++i) s += counts[i];
  return s;
}

void checkAllToAllv(const ValidationContext& ctx, const char* op, const CollectiveArgs& a) {
  const struct {
    const char* name;
    const size_t* ptr;
  } arrays[] = {{"sendCounts", a.sendCounts},
                {"sendDispls", a.sendDispls},
                {"recvCounts", a.recvCounts},
                {"recvDispls", a.recvDispls}};
  for (const auto& arr : arrays) {
    if (arr.ptr == nullptr) fail(ctx, op, arr.name, "null pointer");
    if (a.countsLocation == CountsLocation::Device) checkBuffer(ctx, op, arr.name, arr.ptr);
  }
  // Device counts are unknown on the host: both buffers are required. Host counts: only where data flows.
  const bool device = a.countsLocation == CountsLocation::Device;
  if (device || hostSum(a.sendCounts, ctx.nRanks) > 0) checkBuffer(ctx, op, "send", a.input);
  if (device || hostSum(a.recvCounts, ctx.nRanks) > 0) checkBuffer(ctx, op, "recv", a.output);
}

void checkSendRecvGroup(const ValidationContext& ctx, const char* op, const CollectiveArgs& a) {
  if (a.numP2POps > 0 && a.p2pOps == nullptr) fail(ctx, op, "p2pOps", "null pointer with operations");
  for (size_t i = 0; i < a.numP2POps; ++i) {
    const P2POp& p = a.p2pOps[i];
    validateP2P(ctx, p.kind == P2POp::Send ? "send" : "recv", p.buffer, p.count, a.dtype, p.peer);
  }
}

// Which buffers a rank touches: the root-only ones are skipped elsewhere (they may be null there).
void checkDataBuffers(const ValidationContext& ctx, const char* op, const CollectiveArgs& a) {
  const bool root = a.root == ctx.rank;
  switch (a.collective) {
    case Collective::Broadcast:  // send on the root only
    case Collective::Scatter:
      if (root) checkBuffer(ctx, op, "send", a.input);
      checkBuffer(ctx, op, "recv", a.output);
      return;
    case Collective::Reduce:  // recv on the root only
    case Collective::Gather:
      checkBuffer(ctx, op, "send", a.input);
      if (root) checkBuffer(ctx, op, "recv", a.output);
      return;
    default:
      checkBuffer(ctx, op, "send", a.input);
      if (a.output != a.input) checkBuffer(ctx, op, "recv", a.output);  // in place: one driver query
  }
}

}  // namespace

PointerInfo CudaPointerQuery::query(const void* ptr) const {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      return {PointerInfo::Kind::Device, attr.device};
    case cudaMemoryTypeManaged:
      return {PointerInfo::Kind::Managed, attr.device};
    case cudaMemoryTypeHost:
      return {PointerInfo::Kind::Host, attr.device};
    default:
      return {};
  }
}

const char* bufferProblem(const PointerInfo& info, int device) {
  switch (info.kind) {
    case PointerInfo::Kind::Unknown:
      return "not device memory (pageable host memory or an invalid pointer)";
    case PointerInfo::Kind::Host:
      return "pinned host memory; the collectives need device memory of the communicator's GPU";
    case PointerInfo::Kind::Managed:
      return nullptr;  // accessible from every GPU
    case PointerInfo::Kind::Device:
      return info.device == device ? nullptr : "device memory of another GPU";
  }
  return "unknown memory type";
}

bool isNoOp(const CollectiveArgs& args) {
  switch (args.collective) {
    case Collective::Barrier:
    case Collective::AllToAllv:
      return false;
    case Collective::SendRecv:
      return args.numP2POps == 0;
    default:
      return args.count == 0;
  }
}

void validateCollective(const ValidationContext& ctx, const char* op, const CollectiveArgs& args) {
  if (static_cast<int>(args.collective) >= kNumCollectives)
    fail(ctx, op, "collective", "not a Collective value");
  checkDataType(ctx, op, args.dtype);
  if (isReduction(args.collective)) checkReduceOp(ctx, op, args.op);
  if (isRooted(args.collective)) checkRoot(ctx, op, args.root);
  switch (args.collective) {
    case Collective::Barrier:
      return;
    case Collective::AllToAllv:
      return checkAllToAllv(ctx, op, args);
    case Collective::SendRecv:
      return checkSendRecvGroup(ctx, op, args);
    default:
      if (!isNoOp(args)) checkDataBuffers(ctx, op, args);
  }
}

void validateP2P(const ValidationContext& ctx, const char* op, const void* buffer, size_t count,
                 DataType dtype, int peer) {
  checkDataType(ctx, op, dtype);
  if (peer < 0 || peer >= ctx.nRanks) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", ctx.rank, ": ", op, ": peer: ", peer,
                   " out of range [0, ", ctx.nRanks, ")");
  }
  if (count > 0) checkBuffer(ctx, op, "buffer", buffer);
}

}  // namespace meshcomm
