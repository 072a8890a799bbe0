// MeshcommBackend: alltoall_base (equal or host split sizes), alltoall (lists), send, recv. P2P ops are
// always asynchronous on the internal stream (ProcessGroupNCCL semantics); inside a coalescing block they
// join the meshcomm group that endCoalescing() launches as one kernel.
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "exchange.hpp"

namespace meshcomm::torch_backend {

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& outputSplitSizes,
                                                                std::vector<int64_t>& inputSplitSizes,
                                                                const ::c10d::AllToAllOptions& opts) {
  const char* name = "all_to_all_single";
  checkTensor(name, "input", input);
  checkTensor(name, "output", output);
  checkSameDtype(context(name), "output", output, input);
  const Elements in = movementView(input);
  const Elements out = movementView(output);
  const OpInfo op{::c10d::OpType::ALLTOALL_BASE, name, opts.asyncOp, opts.timeout};
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    checkNumel(context(name), "output", output, input.numel());
    TORCH_CHECK(in.count % getSize() == 0, "meshcomm: rank ", getRank(), ": ", name,
                ": input: ", input.numel(), " elements do not split evenly over ", getSize(), " ranks");
    const size_t perPeer = in.count / getSize();
    return run(op, {input}, {output},
               [&](Comm& comm, cudaStream_t s) { comm.allToAll(in.data, out.data, perPeer, in.dtype, s); });
  }
  return run(op, {input}, {output}, [&](Comm& comm, cudaStream_t s) {
    // The host scratch is the backend's: filled under the Comm's lock.
    splitsToCounts(context(name), "input_split_sizes", inputSplitSizes, input, in.count, getSize(),
                   sendCounts_, sendDispls_);
    splitsToCounts(context(name), "output_split_sizes", outputSplitSizes, output, out.count, getSize(),
                   recvCounts_, recvDispls_);
    comm.allToAllv(in.data, sendCounts_.data(), sendDispls_.data(), out.data, recvCounts_.data(),
                   recvDispls_.data(), in.dtype, s, CountsLocation::Host);
  });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const ::c10d::AllToAllOptions& opts) {
  const char* name = "all_to_all";
  checkCount(context(name), "input_tensor_list", inputs.size(), getSize());
  checkCount(context(name), "output_tensor_list", outputs.size(), getSize());
  for (int p = 0; p < getSize(); ++p) {
    checkTensor(name, "input_tensor_list[p]", inputs[p]);
    checkTensor(name, "output_tensor_list[p]", outputs[p]);
    checkSameDtype(context(name), "input_tensor_list[p]", inputs[p], inputs[0]);
    checkSameDtype(context(name), "output_tensor_list[p]", outputs[p], inputs[0]);
  }
  checkNumel(context(name), "output_tensor_list[rank]", outputs[getRank()], inputs[getRank()].numel());
  // One group of sends and receives (the tensors are separate buffers); this rank's own part is a copy.
  return run({::c10d::OpType::ALLTOALL, name, opts.asyncOp, opts.timeout}, inputs, outputs,
             [&](Comm& comm, cudaStream_t s) { exchangeLists(comm, inputs, outputs, s); });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                       int tag) {
  const char* name = "send";
  checkCount(context(name), "tensors", tensors.size(), 1);
  checkTensor(name, "tensor", tensors[0]);
  checkPeer(context(name), dstRank, getSize());
  const Elements e = movementView(tensors[0]);
  return run({::c10d::OpType::SEND, name, /*asyncOp=*/true, ::c10d::kUnsetTimeout}, {tensors[0]},
             {tensors[0]},
             [&](Comm& comm, cudaStream_t s) { comm.send(e.data, e.count, e.dtype, dstRank, s); });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                       int tag) {
  const char* name = "recv";
  checkCount(context(name), "tensors", tensors.size(), 1);
  checkTensor(name, "tensor", tensors[0]);
  checkPeer(context(name), srcRank, getSize());
  const Elements e = movementView(tensors[0]);
  return run({::c10d::OpType::RECV, name, /*asyncOp=*/true, ::c10d::kUnsetTimeout}, {tensors[0]},
             {tensors[0]},
             [&](Comm& comm, cudaStream_t s) { comm.recv(e.data, e.count, e.dtype, srcRank, s); });
}

}  // namespace meshcomm::torch_backend
