// Options of a meshcomm process group (the `pg_options` of init_process_group / new_group, and what
// split_group copies from the parent): c10d's common fields (timeout, group name, global ranks) plus the
// meshcomm Comm sizes. Zero sizes mean the MESHCOMM_* defaults.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstddef>

namespace meshcomm::torch_backend {

struct MeshcommOptions : ::c10d::Backend::Options {
  explicit MeshcommOptions(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
      : ::c10d::Backend::Options("meshcomm", timeout) {}

  size_t scratchBytes = 0;
  size_t packetBytes = 0;
  int channelsPerPeer = 0;
};

}  // namespace meshcomm::torch_backend
