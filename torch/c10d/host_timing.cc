// Host time per call of the layers under a torch allreduce (see host_timing.hpp).
#include "host_timing.hpp"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/FakeProcessGroup.hpp>

#include <chrono>

namespace meshcomm::torch_backend {

namespace {

template <typename Call>
double microsPerCall(const c10::cuda::CUDAStream& stream, int calls, Call&& call) {
  C10_CUDA_CHECK(cudaStreamSynchronize(stream.stream()));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  const auto end = std::chrono::steady_clock::now();
  C10_CUDA_CHECK(cudaStreamSynchronize(stream.stream()));
  return std::chrono::duration<double, std::micro>(end - start).count() / calls;
}

}  // namespace

std::map<std::string, double> hostTimeAllreduce(::c10d::ProcessGroup& group, MeshcommBackend& backend,
                                                at::Tensor& tensor, int calls) {
  TORCH_CHECK(calls > 0, "meshcomm: host timing: calls must be positive, got ", calls);
  TORCH_CHECK(tensor.is_cuda() && tensor.device() == backend.device() && tensor.is_contiguous() &&
                  tensor.scalar_type() == at::kFloat,
              "meshcomm: host timing: needs a contiguous float32 tensor on ", backend.device());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(backend.device().index());
  std::vector<at::Tensor> tensors{tensor};
  ::c10d::AllreduceOptions opts;
  opts.asyncOp = false;

  auto noop = c10::make_intrusive<::c10d::ProcessGroup>(group.getRank(), group.getSize());
  noop->setBackend(c10::DeviceType::CUDA, ::c10d::ProcessGroup::BackendType::CUSTOM,
                   ::c10d::FakeProcessGroup::_create_internal(group.getRank(), group.getSize()));
  noop->setDefaultBackend(::c10d::ProcessGroup::BackendType::CUSTOM);

  std::map<std::string, double> micros;
  micros["comm"] = microsPerCall(stream, calls, [&] {
    backend.withComm([&](Comm& comm) {
      comm.allReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), DataType::F32, ReduceOp::Sum,
                     stream.stream());
    });
  });
  micros["backend"] = microsPerCall(stream, calls, [&] { backend.allreduce(tensors, opts)->wait(); });
  micros["process_group"] = microsPerCall(stream, calls, [&] { group.allreduce(tensors, opts)->wait(); });
  micros["noop_process_group"] =
      microsPerCall(stream, calls, [&] { noop->allreduce(tensors, opts)->wait(); });
  return micros;
}

}  // namespace meshcomm::torch_backend
