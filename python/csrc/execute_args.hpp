// The CollectiveArgs of Algorithm.execute: buffer sizes in bytes (MSCCL++'s shape) -> element counts per
// collective, with the size rules of docs/python.md. Pure (no CUDA), so the rules are tested on the CPU.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "meshcomm/algorithm.hpp"

namespace meshcomm::python {

struct ExecuteRequest {
  Collective collective = Collective::AllReduce;
  int rank = 0;
  int nRanks = 1;
  uintptr_t input = 0;
  uintptr_t output = 0;
  size_t inputSize = 0;   // bytes
  size_t outputSize = 0;  // bytes
  DataType dtype = DataType::F32;
  ReduceOpSpec op;
  uintptr_t stream = 0;
  // "root" (rooted collectives); "send_counts", "send_displs", "recv_counts", "recv_displs" (alltoallv:
  // device pointers to nRanks size_t each). Any other key, or a key the collective does not use, is an error.
  std::map<std::string, uint64_t> extras;
};

// Throws Error(InvalidUsage) "rank R: <collective>: execute: <argument>: <problem>".
CollectiveArgs executeArgs(const ExecuteRequest& request);

}  // namespace meshcomm::python
