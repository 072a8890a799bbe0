// MeshcommTorchComm: broadcast, all_reduce, reduce, reduce_scatter (list, v, single), barrier.
#include <c10/util/Exception.h>

#include <algorithm>

#include "backend.hpp"
#include "checks.hpp"
#include "list_staging.hpp"
#include "reduce_op.hpp"

namespace meshcomm::torch_backend {

namespace {

using torch::comms::TorchWork;

// The op's tensors plus a PREMUL_SUM factor copy, if one was made.
std::vector<at::Tensor> withFactor(std::vector<at::Tensor> tensors, const Reduction& r) {
  if (r.keepAlive.defined()) tensors.push_back(r.keepAlive);
  return tensors;
}

}  // namespace

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::broadcast(at::Tensor& tensor, int root, bool async_op,
                                                           const torch::comms::BroadcastOptions& options) {
  const char* name = "broadcast";
  checkTensor(name, "tensor", tensor);
  checkRoot(context(name), root, size_);
  const Elements e = movementView(tensor);
  return run({name, async_op, options.timeout, options.hints}, {tensor},
             [&](Comm& comm, cudaStream_t s) { comm.broadcast(e.data, e.data, e.count, e.dtype, root, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_reduce(at::Tensor& tensor,
                                                            const torch::comms::ReduceOp& op, bool async_op,
                                                            const torch::comms::AllReduceOptions& options) {
  const char* name = "all_reduce";
  checkTensor(name, "tensor", tensor);
  const Reduction r = reductionView(context(name), tensor, reduceRequest(op));
  const Elements& e = r.elements;
  return run({name, async_op, options.timeout, options.hints}, withFactor({tensor}, r),
             [&](Comm& comm, cudaStream_t s) { comm.allReduce(e.data, e.data, e.count, e.dtype, r.op, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::reduce(const at::Tensor& tensor, int root,
                                                        const torch::comms::ReduceOp& op, bool async_op,
                                                        const torch::comms::ReduceOptions& options) {
  const char* name = "reduce";
  checkTensor(name, "tensor", tensor);
  checkRoot(context(name), root, size_);
  const Reduction r = reductionView(context(name), tensor, reduceRequest(op));
  const Elements& e = r.elements;
  void* recv = root == rank_ ? e.data : nullptr;  // the result lands on the root only, in place
  return run({name, async_op, options.timeout, options.hints}, withFactor({tensor}, r),
             [&](Comm& comm, cudaStream_t s) { comm.reduce(e.data, recv, e.count, e.dtype, r.op, root, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::reduce_scatter(
    at::Tensor& output, const std::vector<at::Tensor>& input_list, const torch::comms::ReduceOp& op,
    bool async_op, const torch::comms::ReduceScatterOptions& options) {
  const char* name = "reduce_scatter";
  checkTensor(name, "output", output);
  checkCount(context(name), "input_list", input_list.size(), size_);
  checkListLike(context(name), "input_list", input_list, output, device_);
  const Reduction r = reductionView(context(name), output, reduceRequest(op));
  std::vector<at::Tensor> keep = withFactor(input_list, r);
  keep.push_back(output);
  const bool direct = consecutive(input_list);
  return run({name, async_op, options.timeout, options.hints}, std::move(keep),
             [&](Comm& comm, cudaStream_t s) {
               const Elements& out = r.elements;
               if (direct) {
                 return comm.reduceScatter(reductionElements(input_list[0]).data, out.data, out.count,
                                           out.dtype, r.op, s);
               }
               const at::Tensor flat = flatLike(output, size_);
               pack(input_list, flat);
               comm.reduceScatter(reductionElements(flat).data, out.data, out.count, out.dtype, r.op, s);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::reduce_scatter_v(
    at::Tensor& output, const std::vector<at::Tensor>& input_list, const torch::comms::ReduceOp& op,
    bool async_op, const torch::comms::ReduceScatterOptions& options) {
  const char* name = "reduce_scatter_v";
  checkTensor(name, "output", output);
  checkList(name, "input_list", input_list, size_);
  int64_t most = 0;
  for (int p = 0; p < size_; ++p) {
    const std::string argument = "input_list[" + std::to_string(p) + "]";
    checkSameDtype(context(name), argument.c_str(), input_list[p], output);
    most = std::max(most, input_list[p].numel());
  }
  checkNumel(context(name), "output", output, input_list[rank_].numel());
  const Reduction r = reductionView(context(name), output, reduceRequest(op));
  std::vector<at::Tensor> keep = withFactor(input_list, r);
  keep.push_back(output);
  // One reduce-scatter over parts padded to the largest (every rank has the same sizes): the padding's
  // results are never read, so its contents do not matter.
  return run({name, async_op, options.timeout, options.hints}, std::move(keep),
             [&](Comm& comm, cudaStream_t s) {
               const at::Tensor flat = at::empty({size_ * most}, output.options());
               const at::Tensor mine = at::empty({most}, output.options());
               for (int p = 0; p < size_; ++p)
                 flat.narrow(0, p * most, input_list[p].numel()).copy_(input_list[p].view(-1), true);
               const Elements out = reductionElements(mine);
               comm.reduceScatter(reductionElements(flat).data, out.data, out.count, out.dtype, r.op, s);
               output.view(-1).copy_(mine.narrow(0, 0, output.numel()), /*non_blocking=*/true);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::reduce_scatter_single(
    at::Tensor& output, const at::Tensor& input, const torch::comms::ReduceOp& op, bool async_op,
    const torch::comms::ReduceScatterSingleOptions& options) {
  const char* name = "reduce_scatter_single";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  checkNumel(context(name), "input", input, output.numel() * size_);
  const Reduction r = reductionView(context(name), output, reduceRequest(op));
  void* in = reductionElements(input).data;
  return run({name, async_op, options.timeout, options.hints}, withFactor({input, output}, r),
             [&](Comm& comm, cudaStream_t s) {
               const Elements& out = r.elements;
               comm.reduceScatter(in, out.data, out.count, out.dtype, r.op, s);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::barrier(bool async_op,
                                                         const torch::comms::BarrierOptions& options) {
  return run({"barrier", async_op, options.timeout, options.hints}, {},
             [&](Comm& comm, cudaStream_t s) { comm.barrier(s); });
}

}  // namespace meshcomm::torch_backend
