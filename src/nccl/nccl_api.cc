// libmeshcomm_nccl.so: the NCCL C API (include/meshcomm/nccl.h) on meshcomm's Comm. docs/nccl.md has the
// design: one ncclComm per meshcomm::Comm, errors mapped to ncclResult_t with ncclGetLastError's text,
// PreMulSum handles per communicator, groups per thread (operations collected and launched at the outermost
// ncclGroupEnd, point-to-point batched into one launch per communicator, or only estimated by
// ncclGroupSimulateEnd; ncclCommInitRank inside a group deferred to the end and run concurrently), revoke.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/logging.hpp"
#include "bootstrap/unique_id.hpp"
#include "collectives/validation.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/nccl.h"
#include "meshcomm/split.hpp"
#include "nccl/local_teardown.hpp"
#include "nccl/nccl_types.hpp"

using meshcomm::BufferRegistration;
using meshcomm::CheckedCall;
using meshcomm::Collective;
using meshcomm::CollectiveArgs;
using meshcomm::Comm;
using meshcomm::CommConfig;
using meshcomm::DataType;
using meshcomm::Error;
using meshcomm::ErrorCode;
using meshcomm::P2POp;
using meshcomm::ReduceOp;
using meshcomm::ReduceOpSpec;
using meshcomm::TcpBootstrap;
using meshcomm::UniqueId;
namespace detail = meshcomm::detail;
namespace shim = meshcomm::nccl;

// A PreMulSum operator made by ncclRedOpCreatePreMulSum (valid until ncclRedOpDestroy).
struct PreMulSumOp {
  bool live = false;
  ncclDataType_t dtype = ncclFloat32;
  ReduceOpSpec spec;
};

// ncclCommRevoke: Live -> Revoking (device abort flag raised, this GPU draining) -> Revoked (quiescent).
enum class RevokeState { Live, Revoking, Revoked };

struct ncclComm {
  std::unique_ptr<Comm> comm;
  int rank = 0;
  int nRanks = 1;
  int device = 0;
  std::string jobKey;  // the unique id's bytes: the same on every rank of the communicator
  int localRanks = 1;  // ranks of this communicator living in this process (ncclCommInitAll, -g/-t)
  std::string lastError;
  std::vector<PreMulSumOp> ops;  // ncclRedOp_t ncclNumOps + i
  bool inGroup = false;          // its point-to-point batch is open in its Comm (while a group is launched)
  bool aborted = false;  // device work stopped (shrink with abort, revoke): destroyed as by ncclCommAbort
  std::atomic<RevokeState> revoke{RevokeState::Live};
};

// An NCCL window: one Comm::registerBuffer registration of its communicator.
struct ncclWindow_vidmem {
  ncclComm* comm = nullptr;
  BufferRegistration registration;
  bool registered = false;  // false while a grouped registration waits for ncclGroupEnd, or after it failed
};

namespace {

thread_local std::string tLastError;  // ncclGetLastError(NULL)

// This thread's group: depth, the initializations it defers (ncclCommInitRank between ncclGroupStart and
// ncclGroupEnd) and the operations it collects, in call order, for the outermost end.
struct DeferredInit {
  ncclComm* comm;
  int nRanks;
  ncclUniqueId id;
  int rank;
  int device;
};
// A collective, or one send or receive, checked by its Comm at the call (CheckedCall: not checked again).
struct QueuedOp {
  ncclComm* comm;
  const char* fn;
  CheckedCall call;
};
// A window registration called inside a group: it is collective over the communicator's ranks, which one
// thread may hold several of, so it runs at ncclGroupEnd (before the group's operations, which may use it).
struct DeferredRegistration {
  ncclComm* comm;
  ncclWindow_vidmem* window;  // handed out at the call; registered at ncclGroupEnd
  void* buff;
  size_t size;
};
// A window deregistration called inside a group (collective too): it runs at ncclGroupEnd, after the group's
// operations.
struct DeferredDeregistration {
  ncclComm* comm;
  ncclWindow_vidmem* window;  // freed once deregistered
};
struct GroupState {
  int depth = 0;
  std::vector<DeferredInit> inits;
  std::vector<DeferredRegistration> registrations;
  std::vector<QueuedOp> ops;
  std::vector<DeferredDeregistration> deregistrations;
};
thread_local GroupState tGroup;

ncclResult_t fail(ncclComm* comm, ncclResult_t r, const std::string& text) {
  tLastError = text;
  if (comm != nullptr) comm->lastError = text;
  MESHCOMM_LOG(WARN, text);
  return r;
}

// Runs `body`, mapping exceptions to ncclResult_t; the text names the function (after `within`, the call
// that runs it, e.g. "ncclGroupEnd", when given) and the rank. No text is built unless `body` throws.
template <class F>
ncclResult_t guarded(const char* fn, ncclComm* comm, F&& body, const char* within = nullptr) {
  auto text = [&](const char* what) {
    return within ? detail::concat(within, ": ", fn, ": ", what) : detail::concat(fn, ": ", what);
  };
  try {
    return body();
  } catch (const Error& e) {
    return fail(comm, shim::resultOf(e.code()), text(e.what()));
  } catch (const std::exception& e) {
    return fail(comm, ncclInternalError, text(e.what()));
  }
}

std::string who(const ncclComm* comm, const char* fn) {
  return comm ? detail::concat("rank ", comm->rank, ": ", fn) : std::string(fn);
}

#define SHIM_REQUIRE(cond, comm, fn, ...) \
  if (!(cond)) return fail(comm, ncclInvalidArgument, detail::concat(who(comm, fn), ": ", __VA_ARGS__))

DataType dtypeOf(ncclComm* comm, const char* fn, ncclDataType_t t) {
  const auto d = shim::dataTypeOf(t);
  if (!d)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who(comm, fn), ": datatype ", static_cast<int>(t), " is invalid");
  return *d;
}

ReduceOpSpec opOf(ncclComm* comm, const char* fn, ncclRedOp_t op, ncclDataType_t t) {
  if (const auto b = shim::builtinOpOf(op)) return ReduceOpSpec(*b);
  const long i = static_cast<long>(op) - ncclNumOps;
  if (i < 0 || i >= static_cast<long>(comm->ops.size()) || !comm->ops[i].live)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who(comm, fn), ": op ", static_cast<int>(op),
                   " is neither a built-in operator nor a live ncclRedOpCreatePreMulSum handle");
  const PreMulSumOp& p = comm->ops[i];
  if (p.dtype != t)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who(comm, fn), ": op ", static_cast<int>(op),
                   " was created for datatype ", static_cast<int>(p.dtype), ", used with ",
                   static_cast<int>(t));
  return p.spec;
}

UniqueId meshcommId(const ncclUniqueId& id) {
  UniqueId uid;
  static_assert(sizeof(uid.bytes) == NCCL_UNIQUE_ID_BYTES, "unique id sizes differ");
  std::memcpy(uid.bytes.data(), id.internal, NCCL_UNIQUE_ID_BYTES);
  return uid;
}

// Builds a communicator (the device must be current in the calling thread).
void initComm(ncclComm* c, int nRanks, const ncclUniqueId& id, int rank, int device) {
  CommConfig cfg;
  cfg.cudaDevice = device;
  c->comm = std::make_unique<Comm>(std::make_shared<TcpBootstrap>(rank, nRanks, meshcommId(id)), cfg);
  c->rank = rank;
  c->nRanks = nRanks;
  c->device = device;
  c->jobKey.assign(id.internal, NCCL_UNIQUE_ID_BYTES);
  // Which ranks share this process (same host, same pid): they are torn down together (local_teardown.hpp).
  meshcomm::Bootstrap& boot = c->comm->communicator().bootstrap();
  std::vector<int64_t> pids(nRanks);
  pids[rank] = static_cast<int64_t>(::getpid());
  boot.allGather(pids.data(), sizeof(int64_t));
  c->localRanks = 0;
  for (int r = 0; r < nRanks; ++r)
    if (pids[r] == pids[rank] && boot.hostId(r) == boot.hostId(rank)) ++c->localRanks;
}

// Raises the communicator's device abort flag (every device wait gives up, so its kernels finish) and marks
// it for a teardown without the agreement with its peers, as ncclCommAbort: they may be gone. Shared by
// ncclCommShrink(NCCL_SHRINK_ABORT) and ncclCommRevoke.
void stopDeviceWork(ncclComm* comm) {
  comm->comm->communicator().abortDeviceWaits();
  comm->aborted = true;
}

void requireNotRevoked(const ncclComm* comm) {
  if (comm->revoke.load() != RevokeState::Live)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", comm->rank,
                   ": the communicator was revoked (ncclCommRevoke): only ncclCommSplit, ncclCommShrink, "
                   "ncclCommDestroy and ncclCommAbort may follow");
}

// Launches one operation on its Comm. With `batches` (the outermost ncclGroupEnd), point-to-point operations
// go into their Comm's group, opened on the first one; the caller closes the groups listed in `batches`.
void launch(const QueuedOp& q, std::vector<ncclComm*>* batches) {
  Comm& c = *q.comm->comm;
  if (q.call.isP2P() && batches != nullptr && !q.comm->inGroup) {
    c.groupStart();
    q.comm->inGroup = true;
    batches->push_back(q.comm);
  }
  c.launch(q.call);
}

// A call its Comm checked: launched now outside a group; inside one, collected for the outermost ncclGroupEnd
// (launched there, not checked again) or ncclGroupSimulateEnd (estimated only).
ncclResult_t enqueue(QueuedOp q) {
  if (tGroup.depth == 0) {
    launch(q, nullptr);
    return ncclSuccess;
  }
  tGroup.ops.push_back(std::move(q));
  return ncclSuccess;
}

// A collective: checked by its Comm at the call (argument errors come from the call, inside a group too).
ncclResult_t submit(ncclComm* comm, const char* fn, const CollectiveArgs& args) {
  requireNotRevoked(comm);
  return enqueue(QueuedOp{comm, fn, comm->comm->check(args)});
}

// A send or receive (p2p.count in elements of dtype), checked likewise.
ncclResult_t submitP2P(ncclComm* comm, const char* fn, const P2POp& p2p, DataType dtype,
                       cudaStream_t stream) {
  requireNotRevoked(comm);
  return enqueue(QueuedOp{comm, fn, comm->comm->checkP2P(p2p, dtype, stream)});
}

// Drops what this thread's open group holds for `comm` (it is being destroyed): operations, a deferred init.
void forgetGroupWork(const ncclComm* comm) {
  auto drop = [comm](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [comm](const auto& x) { return x.comm == comm; }), v.end());
  };
  drop(tGroup.ops);
  drop(tGroup.inits);
  drop(tGroup.registrations);
  drop(tGroup.deregistrations);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  SHIM_REQUIRE(version != nullptr, nullptr, "ncclGetVersion", "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  SHIM_REQUIRE(uniqueId != nullptr, nullptr, "ncclGetUniqueId", "uniqueId is NULL");
  return guarded("ncclGetUniqueId", nullptr, [&] {
    const UniqueId id = TcpBootstrap::createUniqueId(0);  // the size comes from the ranks that join
    std::memcpy(uniqueId->internal, id.bytes.data(), NCCL_UNIQUE_ID_BYTES);
    return ncclSuccess;
  });
}

}  // extern "C"

namespace {

// ncclCommInitRank[Config] and ncclCommInitRankScalable: a communicator through the root of `commId`; inside
// a group, deferred to its outermost end.
ncclResult_t initRank(const char* fn, ncclComm_t* comm, int nranks, const ncclUniqueId& commId, int rank,
                      ncclConfig_t* config) {
  SHIM_REQUIRE(comm != nullptr, nullptr, fn, "comm is NULL");
  SHIM_REQUIRE(nranks >= 1 && rank >= 0 && rank < nranks, nullptr, fn, "rank ", rank, " / nranks ", nranks,
               " out of range");
  const std::string problem = shim::configProblem(config);
  SHIM_REQUIRE(problem.empty(), nullptr, fn, problem);
  return guarded(fn, nullptr, [&] {
    int device = 0;
    MESHCOMM_CUDA_CHECK(cudaGetDevice(&device));
    auto c = std::make_unique<ncclComm>();
    if (tGroup.depth > 0) {  // deferred to ncclGroupEnd: ranks of one process initialize concurrently there
      tGroup.inits.push_back({c.get(), nranks, commId, rank, device});
      c->rank = rank;
      c->nRanks = nranks;
      c->device = device;
    } else {
      initComm(c.get(), nranks, commId, rank, device);
    }
    *comm = c.release();
    return ncclSuccess;
  });
}

}  // namespace

extern "C" {

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return initRank("ncclCommInitRank", comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* fn = "ncclCommInitAll";
  SHIM_REQUIRE(comms != nullptr && ndev >= 1, nullptr, fn, "comms is NULL or ndev ", ndev, " < 1");
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  int saved = 0;
  if (cudaGetDevice(&saved) != cudaSuccess)
    return fail(nullptr, ncclUnhandledCudaError, "ncclCommInitAll: cudaGetDevice");
  if ((r = ncclGroupStart()) != ncclSuccess) return r;
  for (int i = 0; i < ndev && r == ncclSuccess; ++i) {
    const int dev = devlist ? devlist[i] : i;
    if (cudaSetDevice(dev) != cudaSuccess) {
      r = fail(nullptr, ncclInvalidArgument, detail::concat(fn, ": device ", dev, " cannot be set"));
      break;
    }
    r = ncclCommInitRank(&comms[i], ndev, id, i);
  }
  const ncclResult_t g = ncclGroupEnd();
  cudaSetDevice(saved);
  return r != ncclSuccess ? r : g;
}

// The shared end of ncclCommSplit and ncclCommShrink: the parent ranks `members` (in new-rank order, the
// caller among them) form a new communicator. Its rank 0 creates the unique id and hands it to the others
// over the parent's bootstrap, point to point (meshcomm::shareUniqueId): parent ranks outside `members` take
// no part (they may be gone).
ncclComm* joinSubComm(ncclComm* comm, const std::vector<int>& members) {
  const UniqueId id = meshcomm::shareUniqueId(comm->comm->communicator().bootstrap(), members);
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  auto c = std::make_unique<ncclComm>();
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes.data(), NCCL_UNIQUE_ID_BYTES);
  meshcomm::CudaDeviceGuard guard(comm->device);
  initComm(c.get(), static_cast<int>(members.size()), nid, newRank, comm->device);
  return c.release();
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  SHIM_REQUIRE(comm != nullptr && comm->comm != nullptr, nullptr, fn, "comm is NULL or not initialized");
  SHIM_REQUIRE(newcomm != nullptr, comm, fn, "newcomm is NULL");
  const std::string problem = shim::configProblem(config);
  SHIM_REQUIRE(problem.empty(), comm, fn, problem);
  return guarded(fn, comm, [&] {
    static_assert(NCCL_SPLIT_NOCOLOR == meshcomm::kSplitNoColor, "one no-color value");
    const std::vector<int> members =
        meshcomm::splitMembers(comm->comm->communicator().bootstrap(), {color, key});
    *newcomm = members.empty() ? nullptr : joinSubComm(comm, members);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  SHIM_REQUIRE(comm != nullptr, nullptr, "ncclCommFinalize", "comm is NULL");
  return guarded("ncclCommFinalize", comm, [&] {
    requireNotRevoked(comm);  // NCCL: finalizing a revoked communicator is invalid
    if (comm->comm) {
      meshcomm::CudaDeviceGuard guard(comm->device);
      MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());  // every operation enqueued on this device has finished
      comm->comm->checkError();
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  forgetGroupWork(comm);
  return guarded("ncclCommDestroy", nullptr, [&] {
    std::unique_ptr<ncclComm> owned(comm);
    if (owned->comm) {
      meshcomm::CudaDeviceGuard guard(owned->device);
      const cudaError_t err = cudaDeviceSynchronize();  // every operation of this rank has completed
      if (err != cudaSuccess)
        MESHCOMM_LOG(WARN, "rank ", owned->rank,
                     ": ncclCommDestroy: cudaDeviceSynchronize: ", cudaGetErrorString(err));
      // Local ranks of the same job are torn down together (one thread may destroy all of them in turn).
      shim::destroyWithLocalPeers(owned->jobKey, owned->localRanks, std::move(owned->comm), owned->aborted);
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  forgetGroupWork(comm);
  return guarded("ncclCommAbort", nullptr, [&] {
    std::unique_ptr<ncclComm> owned(comm);
    if (owned->comm) {
      meshcomm::CudaDeviceGuard guard(owned->device);
      // Device waits give up; the teardown does not wait for the peers.
      shim::destroyWithLocalPeers(owned->jobKey, owned->localRanks, std::move(owned->comm), true);
    }
    return ncclSuccess;
  });
}

const char* ncclGetErrorString(ncclResult_t result) {
  return shim::resultText(result);
}

const char* ncclGetLastError(ncclComm_t comm) {
  return comm != nullptr ? comm->lastError.c_str() : tLastError.c_str();
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  SHIM_REQUIRE(comm != nullptr && asyncError != nullptr, comm, "ncclCommGetAsyncError",
               "comm or asyncError is NULL");
  *asyncError = ncclSuccess;
  if (!comm->comm) return ncclSuccess;
  switch (comm->revoke.load()) {  // its own abort flag is no failure: NCCL reports the revoke's progress
    case RevokeState::Revoking:
      *asyncError = ncclInProgress;
      return ncclSuccess;
    case RevokeState::Revoked:
      return ncclSuccess;
    case RevokeState::Live:
      break;
  }
  try {
    comm->comm->checkError();
  } catch (const Error& e) {
    *asyncError = shim::resultOf(e.code());
    comm->lastError = detail::concat("ncclCommGetAsyncError: ", e.what());
  }
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  SHIM_REQUIRE(comm != nullptr && count != nullptr, comm, "ncclCommCount", "comm or count is NULL");
  *count = comm->nRanks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  SHIM_REQUIRE(comm != nullptr && device != nullptr, comm, "ncclCommCuDevice", "comm or device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  SHIM_REQUIRE(comm != nullptr && rank != nullptr, comm, "ncclCommUserRank", "comm or rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  SHIM_REQUIRE(ptr != nullptr, nullptr, "ncclMemAlloc", "ptr is NULL");
  const cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess)
    return fail(nullptr, ncclUnhandledCudaError,
                detail::concat("ncclMemAlloc: cudaMalloc(", size, "): ", cudaGetErrorString(e)));
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  const cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess)
    return fail(nullptr, ncclUnhandledCudaError,
                detail::concat("ncclMemFree: cudaFree: ", cudaGetErrorString(e)));
  return ncclSuccess;
}

// Registration is a local hint in NCCL (it enables zero-copy paths); meshcomm registers buffers collectively
// (Comm::registerBuffer, reached through ncclCommWindowRegister), so the handle only records the buffer and
// every call stays correct without it.
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  SHIM_REQUIRE(comm != nullptr && handle != nullptr, comm, "ncclCommRegister", "comm or handle is NULL");
  SHIM_REQUIRE(buff != nullptr || size == 0, comm, "ncclCommRegister", "buff is NULL");
  return guarded("ncclCommRegister", comm, [&] {
    requireNotRevoked(comm);
    *handle = buff;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  SHIM_REQUIRE(comm != nullptr, comm, "ncclCommDeregister", "comm is NULL");
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  SHIM_REQUIRE(op != nullptr && scalar != nullptr && comm != nullptr, comm, fn, "op, scalar or comm is NULL");
  return guarded(fn, comm, [&] {
    const DataType t = dtypeOf(comm, fn, datatype);
    PreMulSumOp p;
    p.live = true;
    p.dtype = datatype;
    if (residence == ncclScalarHostImmediate) {
      p.spec = ReduceOpSpec::preMulSum(shim::elementToDouble(scalar, t));
    } else if (residence == ncclScalarDevice) {
      p.spec = ReduceOpSpec::preMulSumDevice(scalar);
    } else {
      MESHCOMM_THROW(ErrorCode::InvalidUsage, who(comm, fn), ": residence ", static_cast<int>(residence),
                     " is invalid");
    }
    size_t slot = 0;
    while (slot < comm->ops.size() && comm->ops[slot].live) ++slot;
    if (slot == comm->ops.size())
      comm->ops.push_back(p);
    else
      comm->ops[slot] = p;
    *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
    return ncclSuccess;
  });
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclRedOpDestroy";
  SHIM_REQUIRE(comm != nullptr, comm, fn, "comm is NULL");
  const long i = static_cast<long>(op) - ncclNumOps;
  SHIM_REQUIRE(i >= 0 && i < static_cast<long>(comm->ops.size()) && comm->ops[i].live, comm, fn, "op ",
               static_cast<int>(op), " is not a live ncclRedOpCreatePreMulSum handle");
  comm->ops[i].live = false;
  return ncclSuccess;
}

#define SHIM_COMM(fn)                                                                           \
  SHIM_REQUIRE(comm != nullptr && comm->comm != nullptr, nullptr, fn,                           \
               "comm is NULL or not initialized (ncclCommInitRank inside a group completes at " \
               "ncclGroupEnd)")

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAllReduce";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    const DataType t = dtypeOf(comm, fn, datatype);
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::AllReduce, sendbuff, recvbuff, count, t, stream,
                                     opOf(comm, fn, op, datatype)));
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclReduce";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    const DataType t = dtypeOf(comm, fn, datatype);
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::Reduce, sendbuff, recvbuff, count, t, stream,
                                     opOf(comm, fn, op, datatype), root));
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclBroadcast";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::Broadcast, sendbuff, recvbuff, count,
                                     dtypeOf(comm, fn, datatype), stream, {}, root));
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  const char* fn = "ncclReduceScatter";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    const DataType t = dtypeOf(comm, fn, datatype);
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::ReduceScatter, sendbuff, recvbuff, recvcount, t, stream,
                                     opOf(comm, fn, op, datatype)));
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAllGather";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::AllGather, sendbuff, recvbuff, sendcount,
                                     dtypeOf(comm, fn, datatype), stream));
  });
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAlltoAll";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::AllToAll, sendbuff, recvbuff, count,
                                     dtypeOf(comm, fn, datatype), stream));
  });
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclGather";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::Gather, sendbuff, recvbuff, count,
                                     dtypeOf(comm, fn, datatype), stream, {}, root));
  });
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclScatter";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submit(comm, fn,
                  CollectiveArgs::of(Collective::Scatter, sendbuff, recvbuff, count,
                                     dtypeOf(comm, fn, datatype), stream, {}, root));
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  const char* fn = "ncclSend";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submitP2P(comm, fn, P2POp{P2POp::Send, peer, const_cast<void*>(sendbuff), count},
                     dtypeOf(comm, fn, datatype), stream);
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  const char* fn = "ncclRecv";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    return submitP2P(comm, fn, P2POp{P2POp::Recv, peer, recvbuff, count}, dtypeOf(comm, fn, datatype),
                     stream);
  });
}

ncclResult_t ncclGroupStart(void) {
  ++tGroup.depth;
  return ncclSuccess;
}

}  // extern "C"

namespace {

// ncclCommInitRank calls a group deferred, one thread each (they rendezvous with each other).
ncclResult_t runDeferredInits() {
  std::vector<DeferredInit> inits;
  inits.swap(tGroup.inits);
  std::vector<std::string> errors(inits.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < inits.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        MESHCOMM_CUDA_CHECK(cudaSetDevice(inits[i].device));
        initComm(inits[i].comm, inits[i].nRanks, inits[i].id, inits[i].rank, inits[i].device);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  ncclResult_t result = ncclSuccess;
  for (size_t i = 0; i < inits.size(); ++i) {
    if (!errors[i].empty() && result == ncclSuccess)
      result =
          fail(inits[i].comm, ncclSystemError,
               detail::concat("ncclGroupEnd: ncclCommInitRank of rank ", inits[i].rank, ": ", errors[i]));
  }
  return result;
}

// Runs `each(entry)` for every entry of `entries` (deferred window work, each naming its `comm`): one thread
// per communicator on its device, all at once, a communicator's entries in call order. Window
// (de)registrations are collective over ranks this thread may hold several of. Returns the first error
// (also for ncclGetLastError(NULL) on this thread).
template <typename Entry, typename Each>
ncclResult_t eachCommAtOnce(const std::vector<Entry>& entries, const char* fn, const Each& each) {
  std::vector<ncclComm*> comms;
  for (const Entry& e : entries)
    if (std::find(comms.begin(), comms.end(), e.comm) == comms.end()) comms.push_back(e.comm);
  std::vector<ncclResult_t> results(comms.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = guarded(
          fn, comms[i],
          [&] {
            meshcomm::CudaDeviceGuard guard(comms[i]->device);
            for (const Entry& e : entries)
              if (e.comm == comms[i]) each(e);
            return ncclSuccess;
          },
          "ncclGroupEnd");
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < comms.size(); ++i) {
    if (results[i] == ncclSuccess) continue;
    tLastError = comms[i]->lastError;  // set on the worker thread; ncclGetLastError(NULL) reads this one's
    return results[i];
  }
  return ncclSuccess;
}

// The group's window registrations. A window whose registration failed stays unregistered (deregistering it
// only frees the handle).
ncclResult_t runDeferredRegistrations() {
  std::vector<DeferredRegistration> registrations;
  registrations.swap(tGroup.registrations);
  return eachCommAtOnce(registrations, "ncclCommWindowRegister", [](const DeferredRegistration& d) {
    requireNotRevoked(d.comm);
    d.window->registration = d.comm->comm->registerBuffer(d.buff, d.size);
    d.window->registered = true;
  });
}

// The group's window deregistrations; each window is freed.
ncclResult_t runDeferredDeregistrations() {
  std::vector<DeferredDeregistration> deregistrations;
  deregistrations.swap(tGroup.deregistrations);
  return eachCommAtOnce(deregistrations, "ncclCommWindowDeregister", [](const DeferredDeregistration& d) {
    std::unique_ptr<ncclWindow_vidmem> owned(d.window);
    if (owned->registered) d.comm->comm->deregisterBuffer(owned->registration);
  });
}

// A group's operations in call order (collectives each at once, point-to-point into one launch per
// communicator when its batch closes, after the last operation). Returns the first error.
ncclResult_t launchQueued(const std::vector<QueuedOp>& ops) {
  ncclResult_t result = ncclSuccess;
  std::vector<ncclComm*> batches;
  for (const QueuedOp& q : ops) {
    const ncclResult_t r = guarded(
        q.fn, q.comm,
        [&] {
          requireNotRevoked(q.comm);
          launch(q, &batches);
          return ncclSuccess;
        },
        "ncclGroupEnd");
    if (result == ncclSuccess) result = r;
  }
  for (ncclComm* c : batches) {
    c->inGroup = false;
    const ncclResult_t r = guarded("ncclGroupEnd", c, [&] {
      c->comm->groupEnd();
      return ncclSuccess;
    });
    if (result == ncclSuccess) result = r;
  }
  return result;
}

// One launch as the communicator would select it, estimated by the cost model (nccl_types.hpp).
double launchEstimate(const ncclComm& comm, const CollectiveArgs& args, size_t messageBytes) {
  const meshcomm::Selection selection = comm.comm->select(args);
  return shim::estimateLaunchMicroseconds(args.collective, selection.algorithm->name(), messageBytes,
                                          comm.nRanks);
}

// ncclGroupSimulateEnd: the time the group's operations would take, nothing launched. Per communicator, its
// launches one after the other (each collective, then its point-to-point batch as one sendrecv launch whose
// traffic is the larger of the bytes it sends and receives); communicators side by side (own GPUs).
ncclResult_t simulate(const std::vector<QueuedOp>& ops, ncclSimInfo_t* simInfo) {
  struct PerComm {
    explicit PerComm(ncclComm* c) : comm(c) {}
    ncclComm* comm;
    double us = 0;
    std::vector<P2POp> p2p;  // byte counts, as Comm batches them
    size_t sent = 0, received = 0;
  };
  return guarded("ncclGroupSimulateEnd", nullptr, [&] {
    std::vector<PerComm> comms;
    for (const QueuedOp& q : ops) {
      requireNotRevoked(q.comm);
      auto it = std::find_if(comms.begin(), comms.end(), [&](const PerComm& c) { return c.comm == q.comm; });
      PerComm& pc = it != comms.end() ? *it : comms.emplace_back(q.comm);
      const CollectiveArgs& args = q.call.args();
      if (!q.call.isP2P()) {
        if (!meshcomm::isNoOp(args))
          pc.us += launchEstimate(*q.comm, args, args.messageBytes(q.comm->nRanks));
        continue;
      }
      const P2POp& p2p = q.call.p2p();
      const size_t bytes = p2p.count * meshcomm::dataTypeSize(args.dtype);
      if (bytes == 0) continue;
      pc.p2p.push_back(P2POp{p2p.kind, p2p.peer, p2p.buffer, bytes});
      (p2p.kind == P2POp::Send ? pc.sent : pc.received) += bytes;
    }
    double longest = 0;
    for (PerComm& pc : comms) {
      if (!pc.p2p.empty()) {
        CollectiveArgs a;
        a.collective = Collective::SendRecv;
        a.dtype = DataType::U8;
        a.p2pOps = pc.p2p.data();
        a.numP2POps = pc.p2p.size();
        pc.us += launchEstimate(*pc.comm, a, std::max(pc.sent, pc.received));
      }
      longest = std::max(longest, pc.us);
    }
    simInfo->estimatedTime = static_cast<float>(longest);
    return ncclSuccess;
  });
}

// ncclGroupEnd and ncclGroupSimulateEnd (`simInfo` non-null). Only the outermost end acts: deferred
// initializations first, then window registrations, then the collected operations are launched (or estimated
// and dropped), then window deregistrations.
ncclResult_t endGroup(const char* fn, ncclSimInfo_t* simInfo) {
  if (tGroup.depth == 0)
    return fail(nullptr, ncclInvalidUsage, detail::concat(fn, ": no ncclGroupStart to close"));
  if (--tGroup.depth > 0) return ncclSuccess;
  const ncclResult_t inits = runDeferredInits();
  const ncclResult_t registrations = runDeferredRegistrations();
  std::vector<QueuedOp> ops;
  ops.swap(tGroup.ops);
  const ncclResult_t r = simInfo != nullptr ? simulate(ops, simInfo) : launchQueued(ops);
  const ncclResult_t deregistrations = runDeferredDeregistrations();
  for (ncclResult_t result : {inits, registrations, r, deregistrations})
    if (result != ncclSuccess) return result;
  return ncclSuccess;
}

// Ends the rendezvous root of an id that no rank bootstraps through, by joining it as the only rank of a
// one-rank job: the root sends its table and exits (thread and listening socket end now, not after
// MESHCOMM_BOOTSTRAP_TIMEOUT).
void retireRoot(const ncclUniqueId& id, int index) {
  try {
    TcpBootstrap joined(0, 1, meshcommId(id));  // done: the root has sent the one-rank table
  } catch (const Error& e) {
    throw Error(e.code(), detail::concat("ending the bootstrap root of commIds[", index,
                                         "] (every rank bootstraps through commIds[0]'s): ", e.what()));
  }
}

}  // namespace

extern "C" {

ncclResult_t ncclGroupEnd(void) {
  return endGroup("ncclGroupEnd", nullptr);
}

// NCCL's scalable initialization spreads the bootstrap over nId roots. meshcomm's rendezvous root only hands
// out endpoints, so every rank bootstraps through commIds[0] (the communicator is the one a single id gives);
// the creator NCCL assigns to each other id ends that id's root, which nobody else joins.
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  const std::string me = detail::concat("rank ", myrank, ": ncclCommInitRankScalable");
  const char* fn = me.c_str();
  SHIM_REQUIRE(newcomm != nullptr, nullptr, fn, "newcomm is NULL");
  SHIM_REQUIRE(nranks >= 1 && myrank >= 0 && myrank < nranks, nullptr, fn, "myrank ", myrank, " / nranks ",
               nranks, " out of range");
  SHIM_REQUIRE(commIds != nullptr, nullptr, fn, "commIds is NULL");
  SHIM_REQUIRE(nId >= 1 && nId <= nranks, nullptr, fn, "nId ", nId, " must be in [1, nranks = ", nranks, "]");
  const std::string problem = shim::configProblem(config);
  SHIM_REQUIRE(problem.empty(), nullptr, fn, problem);
  std::vector<std::pair<std::string, int>> ids;  // (bytes, index): equal ids sort next to each other
  for (int i = 0; i < nId; ++i) ids.emplace_back(std::string(commIds[i].internal, NCCL_UNIQUE_ID_BYTES), i);
  std::sort(ids.begin(), ids.end());
  for (int i = 1; i < nId; ++i) {
    SHIM_REQUIRE(ids[i].first != ids[i - 1].first, nullptr, fn, "commIds[",
                 std::min(ids[i].second, ids[i - 1].second), "] and commIds[",
                 std::max(ids[i].second, ids[i - 1].second),
                 "] are the same id (each must come from its own ncclGetUniqueId)");
  }
  return guarded(fn, nullptr, [&] {
    for (int i = 0; i < nId; ++i)
      meshcomm::bootstrap::decodeUniqueId(meshcommId(commIds[i]), detail::concat("commIds[", i, "]"));
    for (int i = 1; i < nId; ++i)
      if (shim::scalableIdCreator(i, nranks, nId) == myrank) retireRoot(commIds[i], i);
    return initRank("ncclCommInitRankScalable", newcomm, nranks, commIds[0], myrank, config);
  });
}

// Every rank of the parent not in excludeRanksList calls it (the excluded ones do not: they may be gone); the
// survivors keep their parent order. NCCL_SHRINK_ABORT first makes the parent's device waits give up (kernels
// stuck on a failed rank finish) and marks the parent aborted, so destroying it later skips the teardown
// agreement with ranks that may not answer.
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  SHIM_REQUIRE(comm != nullptr && comm->comm != nullptr, nullptr, fn, "comm is NULL or not initialized");
  SHIM_REQUIRE(newcomm != nullptr, comm, fn, "newcomm is NULL");
  SHIM_REQUIRE(excludeRanksCount >= 0 && (excludeRanksCount == 0 || excludeRanksList != nullptr), comm, fn,
               "excludeRanksList is NULL or excludeRanksCount ", excludeRanksCount, " < 0");
  SHIM_REQUIRE(shrinkFlags == NCCL_SHRINK_DEFAULT || shrinkFlags == NCCL_SHRINK_ABORT, comm, fn,
               "shrinkFlags ", shrinkFlags, " is neither NCCL_SHRINK_DEFAULT nor NCCL_SHRINK_ABORT");
  const std::string problem = shim::configProblem(config);
  SHIM_REQUIRE(problem.empty(), comm, fn, problem);
  std::vector<char> excluded(comm->nRanks, 0);
  for (int i = 0; i < excludeRanksCount; ++i) {
    const int r = excludeRanksList[i];
    SHIM_REQUIRE(r >= 0 && r < comm->nRanks, comm, fn, "excludeRanksList[", i, "] = ", r,
                 " is not a rank of ", comm->nRanks);
    SHIM_REQUIRE(!excluded[r], comm, fn, "excludeRanksList names rank ", r, " twice");
    SHIM_REQUIRE(r != comm->rank, comm, fn, "excludeRanksList names the calling rank ", r,
                 " (excluded ranks do not call ncclCommShrink)");
    excluded[r] = 1;
  }
  return guarded(fn, comm, [&] {
    if (shrinkFlags == NCCL_SHRINK_ABORT) stopDeviceWork(comm);
    std::vector<int> members;
    for (int r = 0; r < comm->nRanks; ++r)
      if (!excluded[r]) members.push_back(r);
    *newcomm = joinSubComm(comm, members);
    return ncclSuccess;
  });
}
// Stops the communicator's in-flight operations: its device abort flag makes every wait of its kernels give
// up, then this GPU is drained (its kernels have exited: quiescent). ncclCommGetAsyncError says
// ncclInProgress meanwhile (seen from other threads: the call returns once quiescent), then ncclSuccess.
// Afterwards only split, shrink, destroy and abort; destroy skips the agreement with the peers, as after
// ncclCommAbort.
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  const char* fn = "ncclCommRevoke";
  SHIM_REQUIRE(comm != nullptr && comm->comm != nullptr, nullptr, fn, "comm is NULL or not initialized");
  SHIM_REQUIRE(revokeFlags == NCCL_REVOKE_DEFAULT, comm, fn, "revokeFlags ", revokeFlags,
               " must be NCCL_REVOKE_DEFAULT (0)");
  RevokeState live = RevokeState::Live;
  if (!comm->revoke.compare_exchange_strong(live, RevokeState::Revoking)) return ncclSuccess;  // done before
  const ncclResult_t r = guarded(fn, comm, [&] {
    stopDeviceWork(comm);
    meshcomm::CudaDeviceGuard guard(comm->device);
    MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());  // like finalize and destroy: every kernel of this GPU
    return ncclSuccess;
  });
  comm->revoke.store(RevokeState::Revoked);
  return r;
}
// Windows: NCCL's collective registration of one buffer per rank is meshcomm's Comm::registerBuffer (the
// zero-copy allreduce runs on calls inside windows). The flags are hints (symmetric or not, meshcomm learns
// every peer's offset on the device). Inside a group both calls are collective work of ncclGroupEnd (as in
// NCCL, where one thread may hold several communicators, nccl-tests -R 2): the handle is returned at once,
// registered before the group's operations and deregistered (and freed) after them.
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int) {
  const char* fn = "ncclCommWindowRegister";
  SHIM_COMM(fn);
  SHIM_REQUIRE(win != nullptr, comm, fn, "win is NULL");
  return guarded(fn, comm, [&] {
    requireNotRevoked(comm);
    auto w = std::make_unique<ncclWindow_vidmem>();
    w->comm = comm;
    if (tGroup.depth > 0) {  // registered at ncclGroupEnd, with the other communicators of this thread
      tGroup.registrations.push_back({comm, w.get(), buff, size});
    } else {
      w->registration = comm->comm->registerBuffer(buff, size);
      w->registered = true;
    }
    *win = w.release();
    return ncclSuccess;
  });
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  const char* fn = "ncclCommWindowDeregister";
  SHIM_COMM(fn);
  SHIM_REQUIRE(win != nullptr && win->comm == comm, comm, fn,
               "win is NULL or belongs to another communicator");
  return guarded(fn, comm, [&] {
    auto pending = std::find_if(tGroup.registrations.begin(), tGroup.registrations.end(),
                                [win](const DeferredRegistration& d) { return d.window == win; });
    MESHCOMM_REQUIRE(pending == tGroup.registrations.end(), who(comm, fn),
                     ": the window's registration waits for ncclGroupEnd; deregister it after the group");
    if (tGroup.depth > 0) {  // at ncclGroupEnd, with the other communicators of this thread
      tGroup.deregistrations.push_back({comm, win});
      return ncclSuccess;
    }
    std::unique_ptr<ncclWindow_vidmem> owned(win);
    if (owned->registered) comm->comm->deregisterBuffer(owned->registration);
    return ncclSuccess;
  });
}
// ncclGroupEnd without launching: fills simInfo->estimatedTime (microseconds) and drops the group's
// operations. A simInfo that is not usable is refused before anything happens (the group stays open); a
// nested one only closes its level, as in NCCL (the outermost end decides).
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const std::string problem = shim::simInfoProblem(simInfo);
  SHIM_REQUIRE(problem.empty(), nullptr, "ncclGroupSimulateEnd", problem, " (the group stays open)");
  return endGroup("ncclGroupSimulateEnd", simInfo);
}

// The profiling names (pncclAllReduce, ...): aliases of the functions above, exported like them.
#define SHIM_PROFILING_ALIAS(fn) __attribute__((alias(#fn))) __typeof__(fn) p##fn;
MESHCOMM_NCCL_FUNCTIONS(SHIM_PROFILING_ALIAS)
#undef SHIM_PROFILING_ALIAS

}  // extern "C"
