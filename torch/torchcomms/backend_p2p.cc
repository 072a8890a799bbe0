// MeshcommTorchComm: send, recv and batch_op_issue. A batch is one meshcomm group of sends and receives:
// one kernel, so ring exchanges (every rank sends to the next and receives from the previous) cannot
// deadlock. A single send or recv runs alone, as ncclSend/ncclRecv outside a group.
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "exchange.hpp"

namespace meshcomm::torch_backend {

using torch::comms::TorchWork;

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::send(const at::Tensor& tensor, int dst, bool async_op,
                                                      const torch::comms::SendOptions& options) {
  const char* name = "send";
  checkTensor(name, "tensor", tensor);
  checkPeer(context(name), dst, size_);
  const Elements e = movementView(tensor);
  return run({name, async_op, options.timeout, options.hints}, {tensor},
             [&](Comm& comm, cudaStream_t s) { comm.send(e.data, e.count, e.dtype, dst, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::recv(at::Tensor& tensor, int src, bool async_op,
                                                      const torch::comms::RecvOptions& options) {
  const char* name = "recv";
  checkTensor(name, "tensor", tensor);
  checkPeer(context(name), src, size_);
  const Elements e = movementView(tensor);
  return run({name, async_op, options.timeout, options.hints}, {tensor},
             [&](Comm& comm, cudaStream_t s) { comm.recv(e.data, e.count, e.dtype, src, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchComm::batch_op_issue(
    const std::vector<torch::comms::BatchSendRecv::P2POp>& ops, bool async_op,
    const torch::comms::BatchP2POptions& options) {
  const char* name = "batch_op_issue";
  using Type = torch::comms::BatchSendRecv::P2POp::OpType;
  std::vector<at::Tensor> tensors;
  tensors.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string argument = "ops[" + std::to_string(i) + "].tensor";
    checkTensor(name, argument.c_str(), ops[i].tensor);
    checkPeer(context(name), ops[i].peer, size_);
    tensors.push_back(ops[i].tensor);
  }
  return run({name, async_op, options.timeout, options.hints}, std::move(tensors),
             [&](Comm& comm, cudaStream_t s) {
               asGroup(comm, [&](Comm& c) {
                 for (const auto& op : ops) {
                   const Elements e = movementView(op.tensor);
                   if (op.type == Type::SEND) {
                     c.send(e.data, e.count, e.dtype, op.peer, s);
                   } else {
                     c.recv(e.data, e.count, e.dtype, op.peer, s);
                   }
                 }
               });
             });
}

}  // namespace meshcomm::torch_backend
