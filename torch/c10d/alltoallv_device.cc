// MeshcommBackend::allToAllSingleDeviceSplits: all_to_all_single whose split sizes (rows per peer) are
// device integer tensors. Counts and displacements (elements, size_t) are computed on the op stream into
// one small buffer from the caching allocator (copy, scale, cumsum), then meshcomm's alltoallv reads them
// on the device: no host synchronisation, no setup when the splits change, capturable in a CUDA graph
// (replays read whatever the split tensors hold then).
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"

namespace meshcomm::torch_backend {

namespace {

void checkSplits(const OpContext& ctx, const char* argument, const at::Tensor& splits,
                 const at::Device& device, int size) {
  checkOnDevice(ctx, argument, splits, device);  // any strides: only copied into the count table
  TORCH_CHECK(splits.scalar_type() == at::kLong || splits.scalar_type() == at::kInt, "meshcomm: rank ",
              ctx.rank, ": ", ctx.op, ": ", argument, ": dtype ", splits.scalar_type(),
              ", expected torch.int64 or int32");
  TORCH_CHECK(splits.dim() == 1 && splits.numel() == size, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ",
              argument, ": shape ", splits.sizes(), ", expected [", size, "] (one split size per rank)");
}

// Elements of meshcomm's view (bytes for a dtype meshcomm has no type for) per row (dim 0) of t.
int64_t perRow(const OpContext& ctx, const char* argument, const at::Tensor& t) {
  TORCH_CHECK(t.dim() >= 1, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument,
              ": needs a tensor of at least one dimension");
  int64_t rest = 1;
  for (int64_t d = 1; d < t.dim(); ++d) rest *= t.size(d);
  return meshcommType(t.scalar_type()) ? rest : rest * static_cast<int64_t>(t.element_size());
}

// counts = splits * perRow, displs = exclusive prefix sum of counts (both int64 views of size_t slots).
void fillCountsAndDispls(const at::Tensor& splits, int64_t rowElems, const at::Tensor& counts,
                         const at::Tensor& displs) {
  counts.copy_(splits, /*non_blocking=*/true);
  counts.mul_(rowElems);
  at::cumsum_out(const_cast<at::Tensor&>(displs), counts, 0);
  displs.sub_(counts);
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::allToAllSingleDeviceSplits(at::Tensor& output,
                                                                             at::Tensor& input,
                                                                             const at::Tensor& outputSplits,
                                                                             const at::Tensor& inputSplits,
                                                                             bool asyncOp) {
  const char* name = "all_to_all_single";
  const OpContext ctx = context(name);
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(ctx, "output", output, input);
  checkSplits(ctx, "input_split_sizes", inputSplits, state_->device, getSize());
  checkSplits(ctx, "output_split_sizes", outputSplits, state_->device, getSize());
  const Elements in = movementView(input);
  const Elements out = movementView(output);
  const int64_t inRow = perRow(ctx, "input", input);
  const int64_t outRow = perRow(ctx, "output", output);
  const int n = getSize();
  return run({::c10d::OpType::ALLTOALL_BASE, name, asyncOp, ::c10d::kUnsetTimeout},
             {input, inputSplits, outputSplits}, {output}, [&](Comm& comm, cudaStream_t s) {
               // Allocated on the op stream and released after the launch: the allocator reuses the block
               // only for later work of this stream, which runs after the kernel has read it.
               const at::Tensor table = at::empty({4 * n}, input.options().dtype(at::kLong));
               const auto parts = table.chunk(4);
               fillCountsAndDispls(inputSplits, inRow, parts[0], parts[1]);
               fillCountsAndDispls(outputSplits, outRow, parts[2], parts[3]);
               // meshcomm needs device buffers even where a rank sends or receives nothing.
               const at::Tensor dummy = (in.data == nullptr || out.data == nullptr)
                                            ? at::empty({16}, input.options().dtype(at::kByte))
                                            : at::Tensor();
               void* send = in.data ? in.data : dummy.data_ptr();
               void* recv = out.data ? out.data : dummy.data_ptr();
               const auto* table64 = reinterpret_cast<const size_t*>(table.data_ptr<int64_t>());
               comm.allToAllv(send, table64, table64 + n, recv, table64 + 2 * n, table64 + 3 * n, in.dtype, s,
                              CountsLocation::Device);
             });
}

}  // namespace meshcomm::torch_backend
