// Argument validation of the Comm API. Pure functions over the call's arguments and the results of pointer
// queries (an interface, so CPU unit tests can fake them). Errors are Error(InvalidUsage) with
// "rank R: <op>: <argument>: <problem>". Nothing here synchronises or allocates on success.
#pragma once

#include <cstddef>

#include "meshcomm/algorithm.hpp"

namespace meshcomm {

// What cudaPointerGetAttributes says about a pointer.
struct PointerInfo {
  enum class Kind { Unknown, Host, Device, Managed } kind = Kind::Unknown;
  int device = -1;
};

class PointerQuery {
 public:
  virtual ~PointerQuery() = default;
  virtual PointerInfo query(const void* ptr) const = 0;
};

// cudaPointerGetAttributes (host-side, no sync); clears the error it leaves for unknown pointers.
class CudaPointerQuery : public PointerQuery {
 public:
  PointerInfo query(const void* ptr) const override;
};

struct ValidationContext {
  int rank;
  int nRanks;
  int device;  // this communicator's GPU
  const PointerQuery& pointers;
};

// The problem with a buffer the kernel accesses on `device` (nullptr if it is fine): device or managed
// memory of that GPU.
const char* bufferProblem(const PointerInfo& info, int device);

// Checks dtype/op/root ranges and every pointer the call uses on this rank (null where data flows, memory
// of this GPU). `op` names the API call ("allreduce", "send", ...). A call that moves no data (count 0)
// is checked for enums and root only.
void validateCollective(const ValidationContext& ctx, const char* op, const CollectiveArgs& args);
// One point-to-point operation: peer range (self allowed), dtype range, buffer when count > 0.
void validateP2P(const ValidationContext& ctx, const char* op, const void* buffer, size_t count,
                 DataType dtype, int peer);

// True when the call moves no data and returns at once on every rank (count 0; never for barrier,
// alltoallv or sendrecv, whose sizes are per peer).
bool isNoOp(const CollectiveArgs& args);

}  // namespace meshcomm
