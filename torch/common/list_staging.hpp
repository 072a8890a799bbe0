// Tensor lists as one buffer: a collective writes (or reads) one flat buffer of n equal parts; a list of n
// tensors is used directly when its tensors already lie back to back in order, and otherwise staged through
// a flat tensor allocated on the op stream, with the copies on that stream too.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace meshcomm::torch_backend {

// The list's tensors lie back to back in one storage, in order, each contiguous.
bool consecutive(const std::vector<at::Tensor>& list);

// A 1-D tensor of n * t.numel() elements with t's options.
at::Tensor flatLike(const at::Tensor& t, int n);

// Copies part i of `flat` (list.size() equal parts) into list[i] (unpack), or list[i] into it (pack);
// asynchronous on the current stream.
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& list);
void pack(const std::vector<at::Tensor>& list, const at::Tensor& flat);

}  // namespace meshcomm::torch_backend
