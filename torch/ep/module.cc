// The extension meshcomm._torch_ep (pybind11, torch's copy; docs/ep.md): meshcomm::ep::EpBuffer on torch
// tensors. meshcomm.ep.Buffer (Python) drives it with DeepEP's V1 API: it chooses the streams, allocates the
// outputs and shares the UniqueId over the torch process group; this module checks tensors and launches.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
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
#include "meshcomm/ep/low_latency_buffer.hpp"

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

// The buffers of one meshcomm.ep.Buffer and the Comm they run on: an EpBuffer (normal mode) when `bytes` > 0,
// a LowLatencyBuffer when `lowLatencyBytes` > 0.
class EpRuntime {
 public:
  EpRuntime(const py::bytes& uniqueId, int rank, int size, int device, int64_t bytes, int blocks,
            int64_t lowLatencyBytes, int lowLatencyBlocks, int64_t networkBytes)
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
      if (bytes > 0) {
        buffer_ = std::make_unique<ep::EpBuffer>(*comm_, static_cast<size_t>(bytes), blocks,
                                                 static_cast<size_t>(networkBytes));
      }
      if (lowLatencyBytes > 0) {
        lowLatency_ = std::make_unique<ep::LowLatencyBuffer>(*comm_, static_cast<size_t>(lowLatencyBytes),
                                                             lowLatencyBlocks);
      }
    });
  }

  ~EpRuntime() { destroy(); }

  // Collective: drains and frees the buffer and its Comm.
  void destroy() {
    py::gil_scoped_release release;
    buffer_.reset();
    lowLatency_.reset();
    comm_.reset();
    destroyed_ = true;
  }

  ep::EpBuffer& buffer(const char* op) {
    TORCH_CHECK(!destroyed_, "meshcomm.ep: rank ", rank_, ": ", op, ": the buffer was destroyed");
    TORCH_CHECK(buffer_, "meshcomm.ep: rank ", rank_, ": ", op,
                ": the Buffer has no normal-mode region (built with num_nvl_bytes=0)");
    return *buffer_;
  }

  ep::LowLatencyBuffer& lowLatency(const char* op) {
    TORCH_CHECK(!destroyed_, "meshcomm.ep: rank ", rank_, ": ", op, ": the buffer was destroyed");
    TORCH_CHECK(lowLatency_, "meshcomm.ep: rank ", rank_, ": ", op,
                ": the Buffer was built without low_latency_mode=True");
    return *lowLatency_;
  }

  uint64_t lowLatencyDispatch(const at::Tensor& x, const at::Tensor& topkIdx, at::Tensor& recvX,
                              const OptTensor& recvScales, at::Tensor& recvCount, at::Tensor& srcInfo,
                              at::Tensor& layoutRange, const OptTensor& cumulativeStats,
                              const OptTensor& waitStats, int maxTokens, int numExperts, bool fp8,
                              bool roundScale, bool ue8m0, int phases, uint64_t ticket, int64_t stream) {
    const char* op = "low_latency_dispatch";
    checkTensor(rank_, op, "x", x, at::kBFloat16, device_);
    checkTensor(rank_, op, "topk_idx", topkIdx, at::kLong, device_);
    TORCH_CHECK(x.dim() == 2 && topkIdx.dim() == 2 && topkIdx.size(0) == x.size(0), "meshcomm.ep: rank ",
                rank_, ": ", op, ": x must be [tokens, hidden] and topk_idx [tokens, topk]");
    checkTensor(rank_, op, "packed_recv_count", recvCount, at::kInt, device_);
    checkTensor(rank_, op, "src_info", srcInfo, at::kInt, device_);
    checkTensor(rank_, op, "layout_range", layoutRange, at::kLong, device_);
    if (cumulativeStats) {
      checkTensor(rank_, op, "cumulative_local_expert_recv_stats", *cumulativeStats, at::kInt, device_);
    }
    if (waitStats) checkTensor(rank_, op, "dispatch_wait_recv_cost_stats", *waitStats, at::kLong, device_);
    ep::LowLatencyDispatchArgs a;
    a.tokens = static_cast<int>(x.size(0));
    a.x = x.data_ptr();
    a.topkIdx = topkIdx.data_ptr<int64_t>();
    a.fp8 = fp8;
    a.roundScale = roundScale;
    a.ue8m0 = ue8m0;
    a.recvX = recvX.data_ptr();
    a.recvScales = recvScales ? recvScales->data_ptr() : nullptr;
    a.recvCount = recvCount.data_ptr<int32_t>();
    a.srcInfo = srcInfo.data_ptr<int32_t>();
    a.layoutRange = layoutRange.data_ptr<int64_t>();
    a.cumulativeRecvStats = dataOf<int32_t>(cumulativeStats);
    a.waitRecvCostStats = dataOf<int64_t>(waitStats);
    const ep::LowLatencyShape shape{maxTokens, static_cast<int>(x.size(1)), numExperts,
                                    static_cast<int>(topkIdx.size(1))};
    c10::cuda::CUDAGuard guard(device_);
    return translateErrors(
        [&] { return lowLatency(op).dispatch(a, shape, phases, ticket, asStream(stream)); });
  }

  uint64_t lowLatencyCombine(const OptTensor& y, const at::Tensor& srcInfo, const at::Tensor& layoutRange,
                             const at::Tensor& topkIdx, const at::Tensor& topkWeights, at::Tensor& out,
                             const OptTensor& waitStats, int maxTokens, int hidden, int numExperts,
                             int phases, uint64_t ticket, int64_t stream) {
    const char* op = "low_latency_combine";
    if (y) checkTensor(rank_, op, "x", *y, at::kBFloat16, device_);
    checkTensor(rank_, op, "handle's src_info", srcInfo, at::kInt, device_);
    checkTensor(rank_, op, "handle's layout_range", layoutRange, at::kLong, device_);
    checkTensor(rank_, op, "topk_idx", topkIdx, at::kLong, device_);
    checkTensor(rank_, op, "topk_weights", topkWeights, at::kFloat, device_);
    checkTensor(rank_, op, "out", out, at::kBFloat16, device_);
    if (waitStats) checkTensor(rank_, op, "combine_wait_recv_cost_stats", *waitStats, at::kLong, device_);
    ep::LowLatencyCombineArgs a;
    a.y = y ? y->data_ptr() : nullptr;
    a.srcInfo = srcInfo.data_ptr<int32_t>();
    a.layoutRange = layoutRange.data_ptr<int64_t>();
    a.tokens = static_cast<int>(topkIdx.size(0));
    a.topkIdx = topkIdx.data_ptr<int64_t>();
    a.topkWeights = topkWeights.data_ptr<float>();
    a.out = out.data_ptr();
    a.waitRecvCostStats = dataOf<int64_t>(waitStats);
    const ep::LowLatencyShape shape{maxTokens, hidden, numExperts, static_cast<int>(topkIdx.size(1))};
    c10::cuda::CUDAGuard guard(device_);
    return translateErrors(
        [&] { return lowLatency(op).combine(a, shape, phases, ticket, asStream(stream)); });
  }

  // The zero-copy combine source of `shape` as a [El][R*M][H] bf16 tensor (a view, not owning).
  at::Tensor lowLatencyCombineSource(int maxTokens, int hidden, int numExperts) {
    const char* op = "get_next_low_latency_combine_buffer";
    const int size = static_cast<int>(comm_ ? comm_->size() : 1);
    const ep::LowLatencyShape shape{maxTokens, hidden, numExperts, 1};
    c10::cuda::CUDAGuard guard(device_);
    void* p = translateErrors([&] { return lowLatency(op).combineSource(shape); });
    return at::from_blob(p, {numExperts / size, static_cast<int64_t>(size) * maxTokens, hidden},
                         at::TensorOptions().dtype(at::kBFloat16).device(device_));
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
    ep::EpBuffer& b = buffer(op);
    at::Tensor rowIndex;
    if (b.nodeSize() < b.size()) {
      // Scratch from the caching allocator on the communication stream (stream-ordered reuse after this
      // call).
      c10::cuda::CUDAStreamGuard onComm(c10::cuda::getStreamFromExternal(asStream(stream), device_.index()));
      rowIndex = at::empty({inRank.size(0), b.size()}, out.options().dtype(at::kInt));
      in.tokenRowIndex = rowIndex.data_ptr<int32_t>();
    }
    translateErrors([&] {
      b.combine(in, shape, {out.data_ptr(), dataOf<float>(outWeights)}, asStream(stream));
    });
  }

 private:
  int rank_;
  at::Device device_;
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<ep::EpBuffer> buffer_;
  std::unique_ptr<ep::LowLatencyBuffer> lowLatency_;
  bool destroyed_ = false;
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
  m.def("low_latency_bytes", [](int maxTokens, int hidden, int ranks, int numExperts) {
    return meshcomm::ep::LowLatencyBuffer::bytesFor(maxTokens, hidden, ranks, numExperts);
  });
  m.attr("LOW_LATENCY_SEND") = static_cast<int>(meshcomm::ep::kLowLatencySend);
  m.attr("LOW_LATENCY_RECEIVE") = static_cast<int>(meshcomm::ep::kLowLatencyReceive);
  m.attr("LOW_LATENCY_BOTH") = static_cast<int>(meshcomm::ep::kLowLatencyBoth);
  py::class_<Shape>(m, "Shape")
      .def(py::init([](int hiddenBytes, int scales, int topk, int numExperts) {
             return Shape{hiddenBytes, scales, topk, numExperts};
           }),
           py::arg("hidden_bytes"), py::arg("scales"), py::arg("topk"), py::arg("num_experts"));
  py::class_<EpRuntime>(m, "EpRuntime")
      .def(py::init<const py::bytes&, int, int, int, int64_t, int, int64_t, int, int64_t>(),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("device"), py::arg("bytes"),
           py::arg("blocks"), py::arg("low_latency_bytes"), py::arg("low_latency_blocks"),
           py::arg("network_bytes"))
      .def("low_latency_dispatch", &EpRuntime::lowLatencyDispatch)
      .def("low_latency_combine", &EpRuntime::lowLatencyCombine)
      .def("low_latency_combine_source", &EpRuntime::lowLatencyCombineSource)
      .def("destroy", &EpRuntime::destroy)
      .def("local_data", &EpRuntime::localData, py::arg("dtype"), py::arg("offset"))
      .def("node_size", [](EpRuntime& r) { return r.buffer("node_size").nodeSize(); })
      .def("dispatch_capacity", &EpRuntime::dispatchCapacity)
      .def("combine_capacity", &EpRuntime::combineCapacity)
      .def("layout", &EpRuntime::layout)
      .def("dispatch_send", &EpRuntime::dispatchSend)
      .def("wait_receive_counts", &EpRuntime::waitReceiveCounts, py::arg("timeout_sec"))
      .def("dispatch_receive", &EpRuntime::dispatchReceive)
      .def("combine", &EpRuntime::combine);
}
