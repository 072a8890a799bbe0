// libmeshcomm_nccl.so: the NCCL C API (include/meshcomm/nccl.h) on meshcomm's Comm. docs/nccl.md has the
// design: one ncclComm per meshcomm::Comm, errors mapped to ncclResult_t with ncclGetLastError's text,
// PreMulSum handles per communicator, groups per thread (point-to-point batched into one launch per
// communicator; ncclCommInitRank inside a group deferred to ncclGroupEnd and run concurrently).
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/nccl.h"
#include "nccl/local_teardown.hpp"
#include "nccl/nccl_types.hpp"

using meshcomm::BufferRegistration;
using meshcomm::Comm;
using meshcomm::CommConfig;
using meshcomm::DataType;
using meshcomm::Error;
using meshcomm::ErrorCode;
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

struct ncclComm {
  std::unique_ptr<Comm> comm;
  int rank = 0;
  int nRanks = 1;
  int device = 0;
  std::string jobKey;  // the unique id's bytes: the same on every rank of the communicator
  int localRanks = 1;  // ranks of this communicator living in this process (ncclCommInitAll, -g/-t)
  std::string lastError;
  std::vector<PreMulSumOp> ops;  // ncclRedOp_t ncclNumOps + i
  bool inGroup = false;          // this thread's open group has point-to-point operations on this comm
  bool aborted = false;          // ncclCommShrink(NCCL_SHRINK_ABORT): destroyed as by ncclCommAbort
};

// An NCCL window: one Comm::registerBuffer registration of its communicator.
struct ncclWindow_vidmem {
  ncclComm* comm = nullptr;
  BufferRegistration registration;
};

namespace {

constexpr int kSplitTag = 0x4e53504c;  // "NSPL": bootstrap tag of ncclCommSplit's id hand-out

thread_local std::string tLastError;  // ncclGetLastError(NULL)

// This thread's group: depth, the communicators whose point-to-point operations it collects, and the
// initializations it defers (ncclCommInitRank between ncclGroupStart and ncclGroupEnd).
struct DeferredInit {
  ncclComm* comm;
  int nRanks;
  ncclUniqueId id;
  int rank;
  int device;
};
struct GroupState {
  int depth = 0;
  std::vector<ncclComm*> comms;
  std::vector<DeferredInit> inits;
};
thread_local GroupState tGroup;

ncclResult_t fail(ncclComm* comm, ncclResult_t r, const std::string& text) {
  tLastError = text;
  if (comm != nullptr) comm->lastError = text;
  MESHCOMM_LOG(WARN, text);
  return r;
}

// Runs `body`, mapping exceptions to ncclResult_t; the text names the function and the rank.
template <class F>
ncclResult_t guarded(const char* fn, ncclComm* comm, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    return fail(comm, shim::resultOf(e.code()), detail::concat(fn, ": ", e.what()));
  } catch (const std::exception& e) {
    return fail(comm, ncclInternalError, detail::concat(fn, ": ", e.what()));
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

// Builds a communicator (the device must be current in the calling thread).
void initComm(ncclComm* c, int nRanks, const ncclUniqueId& id, int rank, int device) {
  UniqueId uid;
  static_assert(sizeof(uid.bytes) == NCCL_UNIQUE_ID_BYTES, "unique id sizes differ");
  std::memcpy(uid.bytes.data(), id.internal, NCCL_UNIQUE_ID_BYTES);
  CommConfig cfg;
  cfg.cudaDevice = device;
  c->comm = std::make_unique<Comm>(std::make_shared<TcpBootstrap>(rank, nRanks, uid), cfg);
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

// Point-to-point inside a group: the first operation of a communicator opens its Comm group.
void joinGroup(ncclComm* comm) {
  if (tGroup.depth == 0 || comm->inGroup) return;
  comm->comm->groupStart();
  comm->inGroup = true;
  tGroup.comms.push_back(comm);
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

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  const char* fn = "ncclCommInitRank";
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
// over the parent's bootstrap, point to point: parent ranks outside `members` take no part (they may be
// gone).
ncclComm* joinSubComm(ncclComm* comm, const std::vector<int>& members) {
  meshcomm::Bootstrap& boot = comm->comm->communicator().bootstrap();
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  const int n = static_cast<int>(members.size());
  UniqueId id;
  if (newRank == 0) {
    id = TcpBootstrap::createUniqueId(n);
    for (int i = 1; i < n; ++i) boot.send(id.bytes.data(), id.bytes.size(), members[i], kSplitTag);
  } else {
    boot.recv(id.bytes.data(), id.bytes.size(), members[0], kSplitTag);
  }
  auto c = std::make_unique<ncclComm>();
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes.data(), NCCL_UNIQUE_ID_BYTES);
  meshcomm::CudaDeviceGuard guard(comm->device);
  initComm(c.get(), n, nid, newRank, comm->device);
  return c.release();
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  SHIM_REQUIRE(comm != nullptr && comm->comm != nullptr, nullptr, fn, "comm is NULL or not initialized");
  SHIM_REQUIRE(newcomm != nullptr, comm, fn, "newcomm is NULL");
  const std::string problem = shim::configProblem(config);
  SHIM_REQUIRE(problem.empty(), comm, fn, problem);
  return guarded(fn, comm, [&] {
    meshcomm::Bootstrap& boot = comm->comm->communicator().bootstrap();
    struct Entry {
      int color, key;
    };
    std::vector<Entry> all(comm->nRanks);
    all[comm->rank] = {color, key};
    boot.allGather(all.data(), sizeof(Entry));
    *newcomm = nullptr;
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    SHIM_REQUIRE(color >= 0, comm, fn, "color ", color, " must be >= 0 or NCCL_SPLIT_NOCOLOR");
    std::vector<int> members;  // parent ranks of my color, ordered by (key, parent rank)
    for (int r = 0; r < comm->nRanks; ++r)
      if (all[r].color == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
    *newcomm = joinSubComm(comm, members);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  SHIM_REQUIRE(comm != nullptr, nullptr, "ncclCommFinalize", "comm is NULL");
  return guarded("ncclCommFinalize", comm, [&] {
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
  *handle = buff;
  return ncclSuccess;
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
    comm->comm->allReduce(sendbuff, recvbuff, count, dtypeOf(comm, fn, datatype),
                          opOf(comm, fn, op, datatype), stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclReduce";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    comm->comm->reduce(sendbuff, recvbuff, count, dtypeOf(comm, fn, datatype), opOf(comm, fn, op, datatype),
                       root, stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclBroadcast";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    comm->comm->broadcast(sendbuff, recvbuff, count, dtypeOf(comm, fn, datatype), root, stream);
    return ncclSuccess;
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
    comm->comm->reduceScatter(sendbuff, recvbuff, recvcount, dtypeOf(comm, fn, datatype),
                              opOf(comm, fn, op, datatype), stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAllGather";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    comm->comm->allGather(sendbuff, recvbuff, sendcount, dtypeOf(comm, fn, datatype), stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclAlltoAll";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    comm->comm->allToAll(sendbuff, recvbuff, count, dtypeOf(comm, fn, datatype), stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclGather";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    comm->comm->gather(sendbuff, recvbuff, count, dtypeOf(comm, fn, datatype), root, stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  const char* fn = "ncclScatter";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    comm->comm->scatter(sendbuff, recvbuff, count, dtypeOf(comm, fn, datatype), root, stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  const char* fn = "ncclSend";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    joinGroup(comm);
    comm->comm->send(sendbuff, count, dtypeOf(comm, fn, datatype), peer, stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  const char* fn = "ncclRecv";
  SHIM_COMM(fn);
  return guarded(fn, comm, [&] {
    joinGroup(comm);
    comm->comm->recv(recvbuff, count, dtypeOf(comm, fn, datatype), peer, stream);
    return ncclSuccess;
  });
}

ncclResult_t ncclGroupStart(void) {
  ++tGroup.depth;
  return ncclSuccess;
}

// The outermost ncclGroupEnd: deferred initializations first (one thread each: they rendezvous with each
// other), then every communicator's point-to-point batch is launched (one kernel per communicator).
ncclResult_t ncclGroupEnd(void) {
  if (tGroup.depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart to close");
  if (--tGroup.depth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  std::vector<DeferredInit> inits;
  inits.swap(tGroup.inits);
  if (!inits.empty()) {
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
    for (size_t i = 0; i < inits.size(); ++i) {
      if (!errors[i].empty() && result == ncclSuccess)
        result =
            fail(inits[i].comm, ncclSystemError,
                 detail::concat("ncclGroupEnd: ncclCommInitRank of rank ", inits[i].rank, ": ", errors[i]));
    }
  }
  std::vector<ncclComm*> comms;
  comms.swap(tGroup.comms);
  for (ncclComm* c : comms) {
    c->inGroup = false;
    const ncclResult_t r = guarded("ncclGroupEnd", c, [&] {
      c->comm->groupEnd();
      return ncclSuccess;
    });
    if (result == ncclSuccess) result = r;
  }
  return result;
}

// Not implemented: a clear error instead of a wrong answer or a call into another library.
#define SHIM_UNSUPPORTED(fn, comm) \
  fail(comm, ncclInvalidUsage,     \
       detail::concat(fn,          \
                      ": not supported by meshcomm's NCCL shim (docs/nccl.md lists what is implemented)"))

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId == 1 && commIds != nullptr)
    return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
  return SHIM_UNSUPPORTED("ncclCommInitRankScalable with more than one id", nullptr);
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
    if (shrinkFlags == NCCL_SHRINK_ABORT) {
      comm->comm->communicator().abortDeviceWaits();
      comm->aborted = true;
    }
    std::vector<int> members;
    for (int r = 0; r < comm->nRanks; ++r)
      if (!excluded[r]) members.push_back(r);
    *newcomm = joinSubComm(comm, members);
    return ncclSuccess;
  });
}
ncclResult_t ncclCommRevoke(ncclComm_t comm, int) {
  return SHIM_UNSUPPORTED("ncclCommRevoke", comm);
}
// Windows: NCCL's collective registration of one buffer per rank is meshcomm's Comm::registerBuffer (the
// zero-copy allreduce runs on calls inside windows). The flags are hints (symmetric or not, meshcomm learns
// every peer's offset on the device).
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int) {
  const char* fn = "ncclCommWindowRegister";
  SHIM_COMM(fn);
  SHIM_REQUIRE(win != nullptr, comm, fn, "win is NULL");
  return guarded(fn, comm, [&] {
    MESHCOMM_REQUIRE(
        tGroup.depth == 0, who(comm, fn),
        ": inside ncclGroupStart/End (several communicators per thread) is not supported; register "
        "outside a group");
    auto w = std::make_unique<ncclWindow_vidmem>();
    w->comm = comm;
    w->registration = comm->comm->registerBuffer(buff, size);
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
    std::unique_ptr<ncclWindow_vidmem> owned(win);
    comm->comm->deregisterBuffer(owned->registration);
    return ncclSuccess;
  });
}
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return SHIM_UNSUPPORTED("ncclGroupSimulateEnd", nullptr);
}

// The profiling names (pncclAllReduce, ...): aliases of the functions above, exported like them.
#define SHIM_PROFILING_ALIAS(fn) __attribute__((alias(#fn))) __typeof__(fn) p##fn;
MESHCOMM_NCCL_FUNCTIONS(SHIM_PROFILING_ALIAS)
#undef SHIM_PROFILING_ALIAS

}  // extern "C"
