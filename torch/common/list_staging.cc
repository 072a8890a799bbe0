// Tensor lists as one buffer (see list_staging.hpp).
#include "list_staging.hpp"

namespace meshcomm::torch_backend {

bool consecutive(const std::vector<at::Tensor>& list) {
  if (list.empty()) return false;
  const auto* base = static_cast<const char*>(list[0].data_ptr());
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_contiguous()) return false;
    if (static_cast<const char*>(list[i].data_ptr()) != base + i * list[0].nbytes()) return false;
    if (!list[i].storage().is_alias_of(list[0].storage())) return false;
  }
  return true;
}

at::Tensor flatLike(const at::Tensor& t, int n) {
  return at::empty({n * t.numel()}, t.options());
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  const auto parts = flat.chunk(static_cast<int64_t>(list.size()));
  for (size_t i = 0; i < list.size(); ++i) list[i].view(-1).copy_(parts[i], /*non_blocking=*/true);
}

void pack(const std::vector<at::Tensor>& list, const at::Tensor& flat) {
  const auto parts = flat.chunk(static_cast<int64_t>(list.size()));
  for (size_t i = 0; i < list.size(); ++i) parts[i].copy_(list[i].view(-1), /*non_blocking=*/true);
}

}  // namespace meshcomm::torch_backend
