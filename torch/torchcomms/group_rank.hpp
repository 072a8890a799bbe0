// Where a torchcomms communicator's rank and size come from. torchcomms passes the backend none: like its
// NCCL backend, meshcomm reads TORCHCOMM_RANK / TORCHCOMM_SIZE (what torch ≥ 2.15's routing sets per group),
// else the launcher's variables (RankEnv: torchrun, OpenMPI, Slurm).
//
// torch 2.11's routing (TORCH_DISTRIBUTED_USE_TORCHCOMMS=1) sets neither for a process group: it calls
// new_comm for every group, the subgroups of dist.new_group included, with the world's variables in place.
// A group source (installed by the Python module meshcomm.torchcomms) reads the group's rank and size from
// torch's group-creation call instead, so that new_group(ranks) builds the group of its members only, and the
// group's CUDA device (its device_id, else the current device): the routing passes an index-less device.
#pragma once

#include <functional>
#include <optional>

namespace meshcomm::torch_backend {

struct GroupRank {
  int rank;
  int size;
  const char* source;  // where they came from, for messages
  int device = -1;     // the CUDA device the group is bound to, if its source knows it (else -1)
};

// The c10d group being created by the calling thread, if any (torch.distributed's group rank and size).
using GroupSource = std::function<std::optional<GroupRank>()>;
__attribute__((visibility("default"))) void setGroupSource(GroupSource source);

// The group source's answer, else TORCHCOMM_RANK/TORCHCOMM_SIZE, else RankEnv. Throws c10::Error naming the
// variables when they are malformed or only one of a pair is set.
GroupRank resolveGroupRank();

}  // namespace meshcomm::torch_backend
