// MeshcommBackend: allgather, reduce_scatter (list and tensor forms, coalesced), gather, scatter. The list
// forms stage through one flat buffer allocated on the op stream (skipped when the list already is one
// consecutive buffer); the copies run on the op stream too, so they are ordered with the collective.
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "list_staging.hpp"

namespace meshcomm::torch_backend {

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const ::c10d::AllgatherOptions& opts) {
  const char* name = "allgather";
  checkCount(context(name), "input_tensors", inputs.size(), 1);
  checkCount(context(name), "output_tensors", outputs.size(), 1);
  checkTensor(name, "input", inputs[0]);
  checkCount(context(name), "output_tensors[0]", outputs[0].size(), getSize());
  checkListLike(context(name), "output_tensors[0]", outputs[0], inputs[0], state_->device);
  const at::Tensor& input = inputs[0];
  const std::vector<at::Tensor>& list = outputs[0];
  const Elements in = movementView(input);
  const bool direct = consecutive(list);
  return run({::c10d::OpType::ALLGATHER, name, opts.asyncOp, opts.timeout}, {input}, list,
             [&](Comm& comm, cudaStream_t s) {
               if (direct) return comm.allGather(in.data, list[0].data_ptr(), in.count, in.dtype, s);
               const at::Tensor flat = flatLike(input, getSize());
               comm.allGather(in.data, flat.data_ptr(), in.count, in.dtype, s);
               unpack(flat, list);
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const ::c10d::AllgatherOptions& opts) {
  const char* name = "allgather_into_tensor";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  checkNumel(context(name), "output", output, input.numel() * getSize());
  const Elements in = movementView(input);
  void* out = output.data_ptr();
  return run({::c10d::OpType::_ALLGATHER_BASE, name, opts.asyncOp, opts.timeout}, {input}, {output},
             [&](Comm& comm, cudaStream_t s) { comm.allGather(in.data, out, in.count, in.dtype, s); });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const ::c10d::AllgatherOptions& opts) {
  const char* name = "allgather_into_tensor_coalesced";
  checkCount(context(name), "outputs", outputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(name, "inputs[i]", inputs[i]);
    checkTensor(name, "outputs[i]", outputs[i]);
    checkSameDtype(context(name), "outputs[i]", outputs[i], inputs[i]);
    checkNumel(context(name), "outputs[i]", outputs[i], inputs[i].numel() * getSize());
  }
  return run({::c10d::OpType::COALESCED, name, opts.asyncOp, opts.timeout}, inputs, outputs,
             [&](Comm& comm, cudaStream_t s) {
               for (size_t i = 0; i < inputs.size(); ++i) {
                 const Elements in = movementView(inputs[i]);
                 comm.allGather(in.data, outputs[i].data_ptr(), in.count, in.dtype, s);
               }
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const ::c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter";
  checkCount(context(name), "output_tensors", outputs.size(), 1);
  checkCount(context(name), "input_tensors", inputs.size(), 1);
  checkTensor(name, "output", outputs[0]);
  checkCount(context(name), "input_tensors[0]", inputs[0].size(), getSize());
  checkListLike(context(name), "input_tensors[0]", inputs[0], outputs[0], state_->device);
  const at::Tensor& output = outputs[0];
  const std::vector<at::Tensor>& list = inputs[0];
  const Reduction r = reductionView(context(name), output, opts.reduceOp);
  std::vector<at::Tensor> keep = list;
  if (r.keepAlive.defined()) keep.push_back(r.keepAlive);
  const bool direct = consecutive(list);
  return run({::c10d::OpType::REDUCE_SCATTER, name, opts.asyncOp, opts.timeout}, keep, {output},
             [&](Comm& comm, cudaStream_t s) {
               const Elements& out = r.elements;
               if (direct) {
                 return comm.reduceScatter(reductionElements(list[0]).data, out.data, out.count, out.dtype,
                                           r.op, s);
               }
               const at::Tensor flat = flatLike(output, getSize());
               pack(list, flat);
               comm.reduceScatter(reductionElements(flat).data, out.data, out.count, out.dtype, r.op, s);
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  checkNumel(context(name), "input", input, output.numel() * getSize());
  const Reduction r = reductionView(context(name), output, opts.reduceOp);
  void* in = reductionElements(input).data;
  std::vector<at::Tensor> keep{input};
  if (r.keepAlive.defined()) keep.push_back(r.keepAlive);
  return run({::c10d::OpType::_REDUCE_SCATTER_BASE, name, opts.asyncOp, opts.timeout}, keep, {output},
             [&](Comm& comm, cudaStream_t s) {
               const Elements& out = r.elements;
               comm.reduceScatter(in, out.data, out.count, out.dtype, r.op, s);
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  checkCount(context(name), "outputs", outputs.size(), inputs.size());
  std::vector<Reduction> reductions;
  std::vector<at::Tensor> keep = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(name, "inputs[i]", inputs[i]);
    checkTensor(name, "outputs[i]", outputs[i]);
    checkSameDtype(context(name), "outputs[i]", outputs[i], inputs[i]);
    checkNumel(context(name), "inputs[i]", inputs[i], outputs[i].numel() * getSize());
    reductions.push_back(reductionView(context(name), outputs[i], opts.reduceOp));
    if (reductions.back().keepAlive.defined()) keep.push_back(reductions.back().keepAlive);
  }
  return run({::c10d::OpType::COALESCED, name, opts.asyncOp, opts.timeout}, keep, outputs,
             [&](Comm& comm, cudaStream_t s) {
               for (size_t i = 0; i < inputs.size(); ++i) {
                 const Elements& out = reductions[i].elements;
                 comm.reduceScatter(reductionElements(inputs[i]).data, out.data, out.count, out.dtype,
                                    reductions[i].op, s);
               }
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const ::c10d::GatherOptions& opts) {
  const char* name = "gather";
  checkCount(context(name), "input_tensors", inputs.size(), 1);
  checkTensor(name, "input", inputs[0]);
  checkRoot(context(name), opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  const at::Tensor& input = inputs[0];
  std::vector<at::Tensor> list;
  if (isRoot) {
    checkCount(context(name), "output_tensors", outputs.size(), 1);
    checkCount(context(name), "output_tensors[0]", outputs[0].size(), getSize());
    checkListLike(context(name), "output_tensors[0]", outputs[0], input, state_->device);
    list = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "meshcomm: rank ", getRank(),
                ": gather: output_tensors: must be empty on a non-root rank");
  }
  const Elements in = movementView(input);
  return run({::c10d::OpType::GATHER, name, opts.asyncOp, opts.timeout}, {input}, list,
             [&](Comm& comm, cudaStream_t s) {
               if (!isRoot) return comm.gather(in.data, nullptr, in.count, in.dtype, root, s);
               if (consecutive(list))
                 return comm.gather(in.data, list[0].data_ptr(), in.count, in.dtype, root, s);
               const at::Tensor flat = flatLike(input, getSize());
               comm.gather(in.data, flat.data_ptr(), in.count, in.dtype, root, s);
               unpack(flat, list);
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const ::c10d::ScatterOptions& opts) {
  const char* name = "scatter";
  checkCount(context(name), "output_tensors", outputs.size(), 1);
  checkTensor(name, "output", outputs[0]);
  checkRoot(context(name), opts.rootRank, getSize());
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == getRank();
  const at::Tensor& output = outputs[0];
  std::vector<at::Tensor> list;
  if (isRoot) {
    checkCount(context(name), "input_tensors", inputs.size(), 1);
    checkCount(context(name), "input_tensors[0]", inputs[0].size(), getSize());
    checkListLike(context(name), "input_tensors[0]", inputs[0], output, state_->device);
    list = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "meshcomm: rank ", getRank(),
                ": scatter: input_tensors: must be empty on a non-root rank");
  }
  const Elements out = movementView(output);
  return run({::c10d::OpType::SCATTER, name, opts.asyncOp, opts.timeout}, list, {output},
             [&](Comm& comm, cudaStream_t s) {
               if (!isRoot) return comm.scatter(nullptr, out.data, out.count, out.dtype, root, s);
               if (consecutive(list))
                 return comm.scatter(list[0].data_ptr(), out.data, out.count, out.dtype, root, s);
               const at::Tensor flat = flatLike(output, getSize());
               pack(list, flat);
               comm.scatter(flat.data_ptr(), out.data, out.count, out.dtype, root, s);
             });
}

}  // namespace meshcomm::torch_backend
