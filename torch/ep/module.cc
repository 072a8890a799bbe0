// The extension meshcomm._torch_ep (pybind11, torch's copy; docs/ep.md): meshcomm::ep::EpBuffer on torch
// tensors. meshcomm.ep.Buffer (Python) drives it with DeepEP's V1 API: it chooses the streams, allocates the
// outputs and shares the UniqueId over the torch process group; this module checks tensors and launches.
#include <c10/cuda/CUDAGuard.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm_state.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/ep/ep_buffer.hpp"

namespace py = pybind11;

namespace meshcomm::torch_backend {

namespace {

using OptTensor = std::optional<at::Tensor>;

// A contiguous CUDA tensor of `dtype` on `device` (or absent), named in errors.
void checkTensor(int rank, const char* op, const char* name, const at::Tensor& t, at::ScalarType dtype,
                 const at::Device& device) {
  TORCH_CHECK(t.is_cuda() && t.device() == device, "meshcomm.ep: rank ", rank, ": ", op, ": ", name,
              " must be a CUDA tensor on ", device, ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, "meshcomm.ep: rank ", rank, ": ", op, ": ", name, " has dtype ",
              t.scalar_type(), ", expected ", dtype);
  TORCH_CHECK(t.is_contiguous(), "meshcomm.ep: rank ", rank, ": ", op, ": ", name, " must be contiguous");
}

template <typename T>
T* dataOf(const OptTensor& t) {
  return t ? static_cast<T*>(t->data_ptr()) : nullptr;
}

cudaStream_t asStream(int64_t stream) {
  return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(stream));
}

// One EpBuffer and the Comm it runs on.
class EpRuntime {
 public:
  EpRuntime(const py::bytes& uniqueId, int rank, int size, int device, int64_t bytes, int blocks)
      : rank_(rank), device_(at::kCUDA, static_cast<c10::DeviceIndex>(device)) {
    const std::string id = uniqueId;
    UniqueId uid;
    TORCH_CHECK(id.size() == uid.bytes.size(), "meshcomm.ep: rank ", rank, ": the UniqueId has ", id.size(),
                " bytes, expected ", uid.bytes.size());
    std::copy(id.begin(), id.end(), uid.bytes.begin());
    py::gil_scoped_release release;  // collective
    c10::cuda::CUDAGuard guard(device_);
    translateErrors([&] {
      CommConfig config;
      config.cudaDevice = device;
      comm_ = std::make_unique<Comm>(std::make_shared<TcpBootstrap>(rank, size, uid), config);
      buffer_ = std::make_unique<ep::EpBuffer>(*comm_, static_cast<size_t>(bytes), blocks);
    });
  }

  ~EpRuntime() { destroy(); }

  // Collective: drains and frees the buffer and its Comm.
  void destroy() {
    py::gil_scoped_release release;
    buffer_.reset();
    comm_.reset();
  }

  ep::EpBuffer& buffer(const char* op) {
    TORCH_CHECK(buffer_, "meshcomm.ep: rank ", rank_, ": ", op, ": the buffer was destroyed");
    return *buffer_;
  }

  // The data area of this rank's region as `dtype` elements from element `offset` (a view, not owning).
  at::Tensor localData(at::ScalarType dtype, int64_t offset) {
    const char* op = "get_local_buffer_tensor";
    ep::EpBuffer& b = buffer(op);
    const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t elements = static_cast<int64_t>(b.localDataBytes()) / element;
    TORCH_CHECK(offset >= 0 && offset <= elements, "meshcomm.ep: rank ", rank_, ": ", op, ": offset ", offset,
                " outside the buffer's ", elements, " elements of ", dtype);
    return at::from_blob(static_cast<char*>(b.localData()) + offset * element, {elements - offset},
                         at::TensorOptions().dtype(dtype).device(device_));
  }

  int64_t dispatchCapacity(const ep::Shape& s) { return buffer("capacity").dispatchCapacity(s); }
  int64_t combineCapacity(const ep::Shape& s) { return buffer("capacity").combineCapacity(s); }

  void layout(const at::Tensor& topkIdx, const ep::Shape& shape, at::Tensor& perRank, at::Tensor& perExpert,
              at::Tensor& inRank, int64_t stream) {
    const char* op = "get_dispatch_layout";
    checkTensor(rank_, op, "topk_idx", topkIdx, at::kLong, device_);
    checkTensor(rank_, op, "num_tokens_per_rank", perRank, at::kInt, device_);
    checkTensor(rank_, op, "num_tokens_per_expert", perExpert, at::kInt, device_);
    checkTensor(rank_, op, "is_token_in_rank", inRank, at::kBool, device_);
    c10::cuda::CUDAGuard guard(device_);
    translateErrors([&] {
      buffer(op).layout(topkIdx.data_ptr<int64_t>(), static_cast<int>(topkIdx.size(0)), shape,
                        {perRank.data_ptr<int>(), perExpert.data_ptr<int>(), inRank.data_ptr<bool>()},
                        asStream(stream));
    });
  }

  void dispatchSend(const at::Tensor& x, const OptTensor& scales, const OptTensor& topkIdx,
                    const OptTensor& topkWeights, const at::Tensor& inRank, const at::Tensor& perRank,
                    const OptTensor& perExpert, const ep::Shape& shape, int expertAlignment, int64_t stream) {
    const char* op = "dispatch";
    TORCH_CHECK(x.is_cuda() && x.device() == device_ && x.is_contiguous() && x.dim() == 2,
                "meshcomm.ep: rank ", rank_, ": dispatch: x must be a contiguous 2-D CUDA tensor on ",
                device_);
    TORCH_CHECK(x.size(1) * x.element_size() == shape.hiddenBytes, "meshcomm.ep: rank ", rank_,
                ": dispatch: x rows have ", x.size(1) * x.element_size(), " bytes, the shape says ",
                shape.hiddenBytes);
    if (scales) checkTensor(rank_, op, "x's scales", *scales, at::kFloat, device_);
    if (topkIdx) checkTensor(rank_, op, "topk_idx", *topkIdx, at::kLong, device_);
    if (topkWeights) checkTensor(rank_, op, "topk_weights", *topkWeights, at::kFloat, device_);
    checkTensor(rank_, op, "is_token_in_rank", inRank, at::kBool, device_);
    checkTensor(rank_, op, "num_tokens_per_rank", perRank, at::kInt, device_);
    if (perExpert) checkTensor(rank_, op, "num_tokens_per_expert", *perExpert, at::kInt, device_);
    ep::DispatchInputs in;
    in.tokens = static_cast<int>(x.size(0));
    in.x = x.data_ptr();
    in.scales = dataOf<const float>(scales);
    in.topkIdx = dataOf<const int64_t>(topkIdx);
    in.topkWeights = dataOf<const float>(topkWeights);
    in.tokenInRank = inRank.data_ptr<bool>();
    in.tokensPerRank = perRank.data_ptr<int>();
    in.tokensPerExpert = dataOf<const int>(perExpert);
    in.expertAlignment = expertAlignment;
    c10::cuda::CUDAGuard guard(device_);
    translateErrors([&] { buffer(op).dispatchSend(in, shape, asStream(stream)); });
  }

  std::pair<int64_t, std::vector<int>> waitReceiveCounts(double timeoutSec) {
    py::gil_scoped_release release;
    ep::ReceiveCounts c = translateErrors([&] { return buffer("dispatch").waitReceiveCounts(timeoutSec); });
    return {c.rows, std::move(c.perLocalExpert)};
  }

  void dispatchReceive(at::Tensor& x, const OptTensor& scales, const OptTensor& topkIdx,
                       const OptTensor& topkWeights, at::Tensor& srcIdx, at::Tensor& rankPrefix,
                       const ep::Shape& shape, int64_t stream) {
    const char* op = "dispatch";
    TORCH_CHECK(x.is_cuda() && x.device() == device_ && x.is_contiguous(), "meshcomm.ep: rank ", rank_,
                ": dispatch: recv_x must be contiguous on ", device_);
    checkTensor(rank_, op, "recv_src_idx", srcIdx, at::kInt, device_);
    checkTensor(rank_, op, "rank_prefix_matrix", rankPrefix, at::kInt, device_);
    ep::DispatchOutputs out;
    out.capacityRows = x.size(0);
    out.x = x.data_ptr();
    out.scales = dataOf<float>(scales);
    out.topkIdx = dataOf<int64_t>(topkIdx);
    out.topkWeights = dataOf<float>(topkWeights);
    out.srcIdx = srcIdx.data_ptr<int>();
    out.rankPrefix = rankPrefix.data_ptr<int>();
    c10::cuda::CUDAGuard guard(device_);
    translateErrors([&] { buffer(op).dispatchReceive(out, shape, asStream(stream)); });
  }

  void combine(const at::Tensor& y, const OptTensor& topkWeights, const at::Tensor& srcIdx,
               const at::Tensor& rankPrefix, const at::Tensor& inRank, const OptTensor& bias0,
               const OptTensor& bias1, at::Tensor& out, const OptTensor& outWeights, const ep::Shape& shape,
               int64_t stream) {
    const char* op = "combine";
    checkTensor(rank_, op, "x", y, at::kBFloat16, device_);
    if (topkWeights) checkTensor(rank_, op, "topk_weights", *topkWeights, at::kFloat, device_);
    checkTensor(rank_, op, "handle's source indices", srcIdx, at::kInt, device_);
    checkTensor(rank_, op, "handle's rank_prefix_matrix", rankPrefix, at::kInt, device_);
    checkTensor(rank_, op, "handle's is_token_in_rank", inRank, at::kBool, device_);
    if (bias0) checkTensor(rank_, op, "bias", *bias0, at::kBFloat16, device_);
    if (bias1) checkTensor(rank_, op, "bias", *bias1, at::kBFloat16, device_);
    checkTensor(rank_, op, "combined_x", out, at::kBFloat16, device_);
    if (outWeights) checkTensor(rank_, op, "combined_topk_weights", *outWeights, at::kFloat, device_);
    ep::CombineInputs in;
    in.rows = static_cast<int>(y.size(0));
    in.y = y.data_ptr();
    in.topkWeights = dataOf<const float>(topkWeights);
    in.srcIdx = srcIdx.data_ptr<int>();
    in.rankPrefix = rankPrefix.data_ptr<int>();
    in.tokens = static_cast<int>(out.size(0));
    in.tokenInRank = inRank.data_ptr<bool>();
    in.bias0 = bias0 ? bias0->data_ptr() : nullptr;
    in.bias1 = bias1 ? bias1->data_ptr() : nullptr;
    c10::cuda::CUDAGuard guard(device_);
    translateErrors([&] {
      buffer(op).combine(in, shape, {out.data_ptr(), dataOf<float>(outWeights)}, asStream(stream));
    });
  }

 private:
  int rank_;
  at::Device device_;
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<ep::EpBuffer> buffer_;
};

}  // namespace

}  // namespace meshcomm::torch_backend

PYBIND11_MODULE(_torch_ep, m) {
  using meshcomm::ep::Shape;
  using meshcomm::torch_backend::EpRuntime;
  m.doc() = "meshcomm's expert-parallel dispatch/combine on torch tensors (used by meshcomm.ep.Buffer)";
  m.def("create_unique_id", [](int nRanks) {
    const meshcomm::UniqueId id = meshcomm::torch_backend::translateErrors(
        [&] { return meshcomm::TcpBootstrap::createUniqueId(nRanks); });
    return py::bytes(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
  });
  py::class_<Shape>(m, "Shape")
      .def(py::init([](int hiddenBytes, int scales, int topk, int numExperts) {
             return Shape{hiddenBytes, scales, topk, numExperts};
           }),
           py::arg("hidden_bytes"), py::arg("scales"), py::arg("topk"), py::arg("num_experts"));
  py::class_<EpRuntime>(m, "EpRuntime")
      .def(py::init<const py::bytes&, int, int, int, int64_t, int>(), py::arg("unique_id"), py::arg("rank"),
           py::arg("size"), py::arg("device"), py::arg("bytes"), py::arg("blocks"))
      .def("destroy", &EpRuntime::destroy)
      .def("local_data", &EpRuntime::localData, py::arg("dtype"), py::arg("offset"))
      .def("dispatch_capacity", &EpRuntime::dispatchCapacity)
      .def("combine_capacity", &EpRuntime::combineCapacity)
      .def("layout", &EpRuntime::layout)
      .def("dispatch_send", &EpRuntime::dispatchSend)
      .def("wait_receive_counts", &EpRuntime::waitReceiveCounts, py::arg("timeout_sec"))
      .def("dispatch_receive", &EpRuntime::dispatchReceive)
      .def("combine", &EpRuntime::combine);
}
