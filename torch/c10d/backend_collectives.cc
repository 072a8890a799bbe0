// MeshcommBackend: broadcast, allreduce (single and coalesced), reduce, barrier. In place on the tensor, as
// c10d defines them.
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"

namespace meshcomm::torch_backend {

namespace {

// The tensors of a reduction plus the PREMUL_SUM factor copy, if one was made.
std::vector<at::Tensor> withFactor(std::vector<at::Tensor> tensors, const Reduction& r) {
  if (r.keepAlive.defined()) tensors.push_back(r.keepAlive);
  return tensors;
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                            const ::c10d::BroadcastOptions& opts) {
  const char* name = "broadcast";
  checkCount(context(name), "tensors", tensors.size(), 1);
  checkTensor(name, "tensors[0]", tensors[0]);
  checkRoot(context(name), opts.rootRank, getSize());
  const at::Tensor& t = tensors[0];
  const Elements e = movementView(t);
  const int root = static_cast<int>(opts.rootRank);
  return run({::c10d::OpType::BROADCAST, name, opts.asyncOp, opts.timeout}, {t}, {t},
             [&](Comm& comm, cudaStream_t s) { comm.broadcast(e.data, e.data, e.count, e.dtype, root, s); });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                            const ::c10d::AllreduceOptions& opts) {
  const char* name = "allreduce";
  checkCount(context(name), "tensors", tensors.size(), 1);
  TORCH_CHECK(!opts.sparseIndices.has_value(), "meshcomm: rank ", getRank(),
              ": allreduce: sparse allreduce is not supported");
  checkTensor(name, "tensors[0]", tensors[0]);
  const at::Tensor& t = tensors[0];
  const Reduction r = reductionView(context(name), t, opts.reduceOp);
  const Elements& e = r.elements;
  return run({::c10d::OpType::ALLREDUCE, name, opts.asyncOp, opts.timeout}, withFactor({t}, r), {t},
             [&](Comm& comm, cudaStream_t s) { comm.allReduce(e.data, e.data, e.count, e.dtype, r.op, s); });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  const char* name = "allreduce_coalesced";
  std::vector<Reduction> reductions;
  std::vector<at::Tensor> keep = tensors;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string argument = "tensors[" + std::to_string(i) + "]";
    checkTensor(name, argument.c_str(), tensors[i]);
    reductions.push_back(reductionView(context(name), tensors[i], opts.reduceOp));
    if (reductions.back().keepAlive.defined()) keep.push_back(reductions.back().keepAlive);
  }
  return run({::c10d::OpType::ALLREDUCE_COALESCED, name, opts.asyncOp, opts.timeout}, keep, tensors,
             [&](Comm& comm, cudaStream_t s) {
               for (const Reduction& r : reductions) {
                 const Elements& e = r.elements;
                 comm.allReduce(e.data, e.data, e.count, e.dtype, r.op, s);
               }
             });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::reduce(std::vector<at::Tensor>& tensors,
                                                         const ::c10d::ReduceOptions& opts) {
  const char* name = "reduce";
  checkCount(context(name), "tensors", tensors.size(), 1);
  checkTensor(name, "tensors[0]", tensors[0]);
  checkRoot(context(name), opts.rootRank, getSize());
  const at::Tensor& t = tensors[0];
  const Reduction r = reductionView(context(name), t, opts.reduceOp);
  const Elements& e = r.elements;
  const int root = static_cast<int>(opts.rootRank);
  void* recv = root == getRank() ? e.data : nullptr;  // the result lands on the root only
  return run({::c10d::OpType::REDUCE, name, opts.asyncOp, opts.timeout}, withFactor({t}, r), {t},
             [&](Comm& comm, cudaStream_t s) { comm.reduce(e.data, recv, e.count, e.dtype, r.op, root, s); });
}

c10::intrusive_ptr<::c10d::Work> MeshcommBackend::barrier(const ::c10d::BarrierOptions& opts) {
  // A device barrier; wait() also blocks the host until it has run (ProcessGroupNCCL's barrier semantics).
  return run({::c10d::OpType::BARRIER, "barrier", opts.asyncOp, opts.timeout, /*blocking=*/true}, {}, {},
             [&](Comm& comm, cudaStream_t s) { comm.barrier(s); });
}

}  // namespace meshcomm::torch_backend
