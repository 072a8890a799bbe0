// Argument checks of the c10d ops (see checks.hpp).
#include "checks.hpp"

#include <c10/util/Exception.h>

namespace meshcomm::torch_backend {

void checkOnDevice(const OpContext& ctx, const char* argument, const at::Tensor& t,
                   const at::Device& device) {
  TORCH_CHECK(t.defined(), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument,
              ": sparse tensors are not supported (layout ", t.layout(), ")");
  TORCH_CHECK(t.is_cuda(), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument, ": a ",
              t.device().type(), " tensor; meshcomm needs CUDA tensors on ", device,
              " (use a 'cpu:gloo,cuda:meshcomm' process group for CPU tensors)");
  TORCH_CHECK(t.device() == device, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument, ": tensor on ",
              t.device(), " but this process group uses ", device,
              " (call torch.cuda.set_device before init_process_group/new_group)");
}

void checkTensor(const OpContext& ctx, const char* argument, const at::Tensor& t, const at::Device& device) {
  checkOnDevice(ctx, argument, t, device);
  TORCH_CHECK(t.is_contiguous(t.suggest_memory_format()), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ",
              argument, ": tensor is not contiguous (sizes ", t.sizes(), ", strides ", t.strides(),
              "); pass tensor.contiguous()");
}

void checkCount(const OpContext& ctx, const char* argument, size_t got, size_t expected) {
  TORCH_CHECK(got == expected, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument, ": ", got,
              " tensors, expected ", expected);
}

void checkSameDtype(const OpContext& ctx, const char* argument, const at::Tensor& t, const at::Tensor& like) {
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ",
              argument, ": dtype ", t.scalar_type(), " differs from the input's ", like.scalar_type());
}

void checkNumel(const OpContext& ctx, const char* argument, const at::Tensor& t, int64_t expected) {
  TORCH_CHECK(t.numel() == expected, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": ", argument, ": ",
              t.numel(), " elements, expected ", expected);
}

void checkListLike(const OpContext& ctx, const char* argument, const std::vector<at::Tensor>& list,
                   const at::Tensor& like, const at::Device& device) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = std::string(argument) + "[" + std::to_string(i) + "]";
    checkTensor(ctx, name.c_str(), list[i], device);
    checkSameDtype(ctx, name.c_str(), list[i], like);
    checkNumel(ctx, name.c_str(), list[i], like.numel());
  }
}

void checkRoot(const OpContext& ctx, int64_t root, int size) {
  TORCH_CHECK(root >= 0 && root < size, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": root: ", root,
              " out of range [0, ", size, ")");
}

void checkPeer(const OpContext& ctx, int peer, int size) {
  TORCH_CHECK(peer >= 0 && peer < size, "meshcomm: rank ", ctx.rank, ": ", ctx.op, ": peer: ", peer,
              " out of range [0, ", size, ")");
}

}  // namespace meshcomm::torch_backend
