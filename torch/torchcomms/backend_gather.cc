// MeshcommTorchComm: all_gather (list, v, single), all_to_all (single, v single, lists), gather, scatter. The
// list forms use the list's tensors directly when they lie back to back in one buffer, otherwise they stage
// through a flat tensor allocated on the op stream (list_staging.hpp); the uneven forms (all_gather_v) are
// one group of sends and receives.
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "exchange.hpp"
#include "list_staging.hpp"

namespace meshcomm::torch_backend {

namespace {

using torch::comms::TorchWork;

std::vector<at::Tensor> joined(std::vector<at::Tensor> list, const at::Tensor& t) {
  list.push_back(t);
  return list;
}

}  // namespace

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_gather(const std::vector<at::Tensor>& tensor_list,
                                                            const at::Tensor& tensor, bool async_op,
                                                            const torch::comms::AllGatherOptions& options) {
  const char* name = "all_gather";
  checkTensor(name, "tensor", tensor);
  checkCount(context(name), "tensor_list", tensor_list.size(), size_);
  checkListLike(context(name), "tensor_list", tensor_list, tensor, device_);
  const Elements in = movementView(tensor);
  const bool direct = consecutive(tensor_list);
  return run({name, async_op, options.timeout, options.hints}, joined(tensor_list, tensor),
             [&](Comm& comm, cudaStream_t s) {
               if (direct) return comm.allGather(in.data, tensor_list[0].data_ptr(), in.count, in.dtype, s);
               const at::Tensor flat = flatLike(tensor, size_);
               comm.allGather(in.data, flat.data_ptr(), in.count, in.dtype, s);
               unpack(flat, tensor_list);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_gather_v(const std::vector<at::Tensor>& tensor_list,
                                                              const at::Tensor& tensor, bool async_op,
                                                              const torch::comms::AllGatherOptions& options) {
  const char* name = "all_gather_v";
  checkTensor(name, "tensor", tensor);
  checkList(name, "tensor_list", tensor_list, size_);
  for (int p = 0; p < size_; ++p) {
    const std::string argument = "tensor_list[" + std::to_string(p) + "]";
    checkSameDtype(context(name), argument.c_str(), tensor_list[p], tensor);
  }
  checkNumel(context(name), "tensor_list[rank]", tensor_list[rank_], tensor.numel());
  return run({name, async_op, options.timeout, options.hints}, joined(tensor_list, tensor),
             [&](Comm& comm, cudaStream_t s) {
               const Elements in = movementView(tensor);
               asGroup(comm, [&](Comm& c) {
                 for (int p = 0; p < size_; ++p) {
                   if (p == rank_) continue;
                   const Elements out = movementView(tensor_list[p]);
                   c.send(in.data, in.count, in.dtype, p, s);
                   c.recv(out.data, out.count, out.dtype, p, s);
                 }
               });
               tensor_list[rank_].copy_(tensor, /*non_blocking=*/true);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_gather_single(
    at::Tensor& output, const at::Tensor& input, bool async_op,
    const torch::comms::AllGatherSingleOptions& options) {
  const char* name = "all_gather_single";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  checkNumel(context(name), "output", output, input.numel() * size_);
  const Elements in = movementView(input);
  void* out = output.data_ptr();
  return run({name, async_op, options.timeout, options.hints}, {input, output},
             [&](Comm& comm, cudaStream_t s) { comm.allGather(in.data, out, in.count, in.dtype, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_to_all_single(
    at::Tensor& output, const at::Tensor& input, bool async_op,
    const torch::comms::AllToAllSingleOptions& options) {
  const char* name = "all_to_all_single";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  checkNumel(context(name), "output", output, input.numel());
  const Elements in = movementView(input);
  const Elements out = movementView(output);
  TORCH_CHECK(in.count % size_ == 0, "meshcomm: rank ", rank_, ": ", name, ": input: ", input.numel(),
              " elements do not split evenly over ", size_, " ranks");
  const size_t perPeer = in.count / size_;
  return run({name, async_op, options.timeout, options.hints}, {input, output},
             [&](Comm& comm, cudaStream_t s) { comm.allToAll(in.data, out.data, perPeer, in.dtype, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_to_all_v_single(
    at::Tensor& output, const at::Tensor& input, const std::vector<uint64_t>& output_split_sizes,
    const std::vector<uint64_t>& input_split_sizes, bool async_op,
    const torch::comms::AllToAllvSingleOptions& options) {
  const char* name = "all_to_all_v_single";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  const Elements in = movementView(input);
  const Elements out = movementView(output);
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  splitsToCounts(context(name), "input_split_sizes", input_split_sizes, input, in.count, size_, sendCounts,
                 sendDispls);
  splitsToCounts(context(name), "output_split_sizes", output_split_sizes, output, out.count, size_,
                 recvCounts, recvDispls);
  return run({name, async_op, options.timeout, options.hints}, {input, output},
             [&](Comm& comm, cudaStream_t s) {
               comm.allToAllv(in.data, sendCounts.data(), sendDispls.data(), out.data, recvCounts.data(),
                              recvDispls.data(), in.dtype, s, CountsLocation::Host);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::all_to_all(const std::vector<at::Tensor>& output_tensor_list,
                                                            const std::vector<at::Tensor>& input_tensor_list,
                                                            bool async_op,
                                                            const torch::comms::AllToAllOptions& options) {
  const char* name = "all_to_all";
  checkList(name, "input_tensor_list", input_tensor_list, size_);
  checkList(name, "output_tensor_list", output_tensor_list, size_);
  for (int p = 0; p < size_; ++p) {
    checkSameDtype(context(name), "input_tensor_list[p]", input_tensor_list[p], input_tensor_list[0]);
    checkSameDtype(context(name), "output_tensor_list[p]", output_tensor_list[p], input_tensor_list[0]);
  }
  checkNumel(context(name), "output_tensor_list[rank]", output_tensor_list[rank_],
             input_tensor_list[rank_].numel());
  std::vector<at::Tensor> keep = input_tensor_list;
  keep.insert(keep.end(), output_tensor_list.begin(), output_tensor_list.end());
  return run(
      {name, async_op, options.timeout, options.hints}, std::move(keep),
      [&](Comm& comm, cudaStream_t s) { exchangeLists(comm, input_tensor_list, output_tensor_list, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::gather(const std::vector<at::Tensor>& output_tensor_list,
                                                        const at::Tensor& input_tensor, int root,
                                                        bool async_op,
                                                        const torch::comms::GatherOptions& options) {
  const char* name = "gather";
  checkTensor(name, "input_tensor", input_tensor);
  checkRoot(context(name), root, size_);
  const bool isRoot = root == rank_;
  if (isRoot) {
    checkCount(context(name), "output_tensor_list", output_tensor_list.size(), size_);
    checkListLike(context(name), "output_tensor_list", output_tensor_list, input_tensor, device_);
  }
  const std::vector<at::Tensor> list = isRoot ? output_tensor_list : std::vector<at::Tensor>{};
  const Elements in = movementView(input_tensor);
  return run({name, async_op, options.timeout, options.hints}, joined(list, input_tensor),
             [&](Comm& comm, cudaStream_t s) {
               if (!isRoot) return comm.gather(in.data, nullptr, in.count, in.dtype, root, s);
               if (consecutive(list))
                 return comm.gather(in.data, list[0].data_ptr(), in.count, in.dtype, root, s);
               const at::Tensor flat = flatLike(input_tensor, size_);
               comm.gather(in.data, flat.data_ptr(), in.count, in.dtype, root, s);
               unpack(flat, list);
             });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::scatter(at::Tensor& output_tensor,
                                                         const std::vector<at::Tensor>& input_tensor_list,
                                                         int root, bool async_op,
                                                         const torch::comms::ScatterOptions& options) {
  const char* name = "scatter";
  checkTensor(name, "output_tensor", output_tensor);
  checkRoot(context(name), root, size_);
  const bool isRoot = root == rank_;
  if (isRoot) {
    checkCount(context(name), "input_tensor_list", input_tensor_list.size(), size_);
    checkListLike(context(name), "input_tensor_list", input_tensor_list, output_tensor, device_);
  }
  const std::vector<at::Tensor> list = isRoot ? input_tensor_list : std::vector<at::Tensor>{};
  const Elements out = movementView(output_tensor);
  return run({name, async_op, options.timeout, options.hints}, joined(list, output_tensor),
             [&](Comm& comm, cudaStream_t s) {
               if (!isRoot) return comm.scatter(nullptr, out.data, out.count, out.dtype, root, s);
               if (consecutive(list))
                 return comm.scatter(list[0].data_ptr(), out.data, out.count, out.dtype, root, s);
               const at::Tensor flat = flatLike(output_tensor, size_);
               pack(list, flat);
               comm.scatter(flat.data_ptr(), out.data, out.count, out.dtype, root, s);
             });
}

}  // namespace meshcomm::torch_backend
