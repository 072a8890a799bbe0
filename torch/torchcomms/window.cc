// MeshcommTorchWindow (see window.hpp).
#include "window.hpp"

#include <c10/util/Exception.h>

#include "checks.hpp"

namespace meshcomm::torch_backend {

using torch::comms::TorchWork;

MeshcommTorchWindow::MeshcommTorchWindow(std::shared_ptr<OpRunner> runner) : runner_(std::move(runner)) {}

MeshcommTorchWindow::~MeshcommTorchWindow() {
  if (window_ == nullptr) return;
  TORCH_WARN("meshcomm: rank ", runner_->rank(),
             ": a window was destroyed while a tensor was registered; deregistering it now (collective)");
  try {
    tensor_deregister();
  } catch (const std::exception& e) {
    TORCH_WARN("meshcomm: rank ", runner_->rank(), ": window teardown: ", e.what());
  }
}

Window& MeshcommTorchWindow::registered(const char* op) const {
  TORCH_CHECK(window_ != nullptr, "meshcomm: rank ", runner_->rank(), ": window ", op,
              ": no tensor is registered (call tensor_register first)");
  return *window_;
}

void MeshcommTorchWindow::checkPeer(const char* op, int peer) const {
  ::meshcomm::torch_backend::checkPeer({runner_->rank(), op}, peer, runner_->state()->size);
}

void MeshcommTorchWindow::tensor_register(const at::Tensor& tensor, bool owning) {
  const OpContext ctx{runner_->rank(), "window tensor_register"};
  TORCH_CHECK(window_ == nullptr, "meshcomm: rank ", ctx.rank, ": ", ctx.op,
              ": a tensor is registered already (tensor_deregister first)");
  TORCH_CHECK(!runner_->closed(), "meshcomm: rank ", ctx.rank, ": ", ctx.op,
              ": the communicator was finalized");
  const std::shared_ptr<CommState>& state = runner_->state();
  checkTensor(ctx, "tensor", tensor, state->device);
  TORCH_CHECK(tensor.nbytes() > 0, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": tensor: empty tensor");
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    TORCH_CHECK(state->comm, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": the communicator was shut down");
    window_ = translateErrors(
        [&] { return std::make_unique<Window>(*state->comm, tensor.data_ptr(), tensor.nbytes()); });
  }
  win_size_ = tensor.nbytes();
  buf_dtype_ = tensor.scalar_type();
  buf_device_ = tensor.device();
  buf_shape_ = tensor.sizes().vec();
  if (owning) buf_tensor_ = tensor;
}

void MeshcommTorchWindow::tensor_deregister() {
  Window& window = registered("tensor_deregister");
  const std::shared_ptr<CommState>& state = runner_->state();
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    translateErrors([&] { window.close(); });
  }
  window_.reset();
  buf_tensor_.reset();
  win_size_ = 0;
  buf_shape_.clear();
}

std::shared_ptr<torch::comms::TorchCommWindow> MeshcommTorchWindow::clone() {
  auto copy = std::make_shared<MeshcommTorchWindow>(runner_);
  if (window_ != nullptr) {
    TORCH_CHECK(
        buf_tensor_.has_value(), "meshcomm: rank ", runner_->rank(),
        ": window clone: the registered tensor is not owned by the window (tensor_register(owning=False))");
    copy->tensor_register(buf_tensor_->clone(), /*owning=*/true);
  }
  return copy;
}

c10::intrusive_ptr<TorchWork> MeshcommTorchWindow::put(const at::Tensor& tensor, int dstRank,
                                                       size_t targetOffsetNelems, bool asyncOp,
                                                       const torch::comms::PutOptions& options) {
  const char* name = "window put";
  Window& window = registered(name);
  const OpContext ctx{runner_->rank(), name};
  checkTensor(ctx, "tensor", tensor, runner_->state()->device);
  checkPeer(name, dstRank);
  TORCH_CHECK(tensor.scalar_type() == buf_dtype_, "meshcomm: rank ", ctx.rank, ": ", name, ": tensor: dtype ",
              tensor.scalar_type(), " differs from the window's ", buf_dtype_);
  const size_t element = tensor.element_size();
  const size_t offset = targetOffsetNelems * element;
  const size_t capacity = window.peerBytes(dstRank);
  TORCH_CHECK(targetOffsetNelems <= capacity / element && tensor.nbytes() <= capacity - offset,
              "meshcomm: rank ", ctx.rank, ": ", name, ": elements [", targetOffsetNelems, ", ",
              targetOffsetNelems + tensor.numel(), ") do not fit rank ", dstRank, "'s window of ",
              capacity / element, " elements");
  const void* src = tensor.data_ptr();
  const size_t bytes = tensor.nbytes();
  return runner_->run({name, asyncOp, options.timeout, options.hints}, {tensor},
                      [&](Comm&, cudaStream_t s) { window.put(src, bytes, dstRank, offset, s); });
}

at::Tensor MeshcommTorchWindow::map_remote_tensor(int rank) {
  const char* name = "window map_remote_tensor";
  Window& window = registered(name);
  checkPeer(name, rank);
  const size_t bytes = window.peerBytes(rank);
  const size_t element = c10::elementSize(buf_dtype_);
  const auto options = at::TensorOptions().dtype(buf_dtype_).device(runner_->state()->device);
  if (bytes == win_size_) return at::from_blob(window.peerData(rank), buf_shape_, options);
  // A peer registered a window of another size: a flat view of all of it.
  return at::from_blob(window.peerData(rank), {static_cast<int64_t>(bytes / element)}, options);
}

c10::intrusive_ptr<TorchWork> MeshcommTorchWindow::signal(int peerRank, bool asyncOp,
                                                          const torch::comms::SignalOptions& options) {
  const char* name = "window signal";
  Window& window = registered(name);
  checkPeer(name, peerRank);
  return runner_->run({name, asyncOp, options.timeout, options.hints}, {},
                      [&](Comm&, cudaStream_t s) { window.signal(peerRank, s); });
}

c10::intrusive_ptr<TorchWork> MeshcommTorchWindow::wait_signal(
    int peerRank, bool asyncOp, const torch::comms::WaitSignalOptions& options) {
  const char* name = "window wait_signal";
  Window& window = registered(name);
  checkPeer(name, peerRank);
  return runner_->run({name, asyncOp, options.timeout, options.hints}, {},
                      [&](Comm&, cudaStream_t s) { window.waitSignal(peerRank, s); });
}

std::shared_ptr<torch::comms::TorchCommWindowAttr> MeshcommTorchWindow::get_attr(int peerRank) {
  checkPeer("window get_attr", peerRank);
  auto attr = std::make_shared<torch::comms::TorchCommWindowAttr>();
  attr->accessType = torch::comms::TorchCommWinAccessType::WIN_ACCESS_TYPE_UNIFIED;  // mapped over NVLink
  return attr;
}

}  // namespace meshcomm::torch_backend
