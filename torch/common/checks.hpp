// Argument checks of the c10d ops: each failure is a c10::Error whose text reads
// "meshcomm: rank R: op: argument: problem" (Python: RuntimeError), raised before anything is enqueued.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "dtypes.hpp"

namespace meshcomm::torch_backend {

// A strided CUDA tensor on the process group's device (any strides).
void checkOnDevice(const OpContext& ctx, const char* argument, const at::Tensor& t, const at::Device& device);

// checkOnDevice, and contiguous (what a meshcomm buffer must be).
void checkTensor(const OpContext& ctx, const char* argument, const at::Tensor& t, const at::Device& device);

// Exactly `n` tensors in a list argument (c10d passes one tensor per process in most lists).
void checkCount(const OpContext& ctx, const char* argument, size_t got, size_t expected);

// Every tensor of `list` checked, with the dtype and element count of `like`.
void checkListLike(const OpContext& ctx, const char* argument, const std::vector<at::Tensor>& list,
                   const at::Tensor& like, const at::Device& device);

void checkSameDtype(const OpContext& ctx, const char* argument, const at::Tensor& t, const at::Tensor& like);

// numel(t) == expected.
void checkNumel(const OpContext& ctx, const char* argument, const at::Tensor& t, int64_t expected);

void checkRoot(const OpContext& ctx, int64_t root, int size);

void checkPeer(const OpContext& ctx, int peer, int size);

}  // namespace meshcomm::torch_backend
