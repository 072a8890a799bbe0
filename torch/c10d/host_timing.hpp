// Host time per call of the layers under a torch allreduce on a meshcomm group, measured in C++ (no Python in
// the loop), for bench/torch/host_overhead.py's breakdown of the torch call's overhead (docs/torch.md).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <map>
#include <string>

#include "backend.hpp"

namespace meshcomm::torch_backend {

// Host µs per call, enqueueing `calls` in-place SUM allreduces of `tensor` back to back on the current stream
// (synchronised before and after, not inside), for each layer:
//   "comm"           Comm::allReduce, the raw call
//   "backend"        MeshcommBackend::allreduce + Work::wait (the backend over the raw call)
//   "process_group"  ProcessGroup::allreduce + wait: torch's dispatcher over the backend
//   "noop_process_group"  the same dispatch to torch's FakeProcessGroup (no launch): torch's own floor
// Collective: every rank of `group` must call it with the same arguments.
std::map<std::string, double> hostTimeAllreduce(::c10d::ProcessGroup& group, MeshcommBackend& backend,
                                                at::Tensor& tensor, int calls);

}  // namespace meshcomm::torch_backend
