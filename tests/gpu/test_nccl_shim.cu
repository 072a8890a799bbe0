// libmeshcomm_nccl.so through its C API (include/meshcomm/nccl.h), one process per GPU: ids and
// initialisation, every collective against a host reference (float values that are small integers, so every
// sum is exact in any order), PreMulSum handles with per-rank host and device scalars, a send/recv ring in a
// group, ncclCommSplit, argument errors with ncclGetLastError, destroy and abort, shrink, initialization
// from several ids (ncclCommInitRankScalable), revoke, group simulation; and, in rank 0's process, one
// communicator per local GPU (ncclCommInitAll) driven from one thread (nccl-tests -g) and from one thread per
// GPU (-t), then destroyed one after the other by one thread. Fresh inputs per case, outputs poisoned (NaN)
// first.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_env.hpp"
#include "meshcomm/nccl.h"

namespace meshcomm::test {
namespace {

#define NCCL_OK(call)                                                             \
  do {                                                                            \
    const ncclResult_t r_ = (call);                                               \
    ASSERT_EQ(r_, ncclSuccess) << #call << ": " << ncclGetErrorString(r_) << ": " \
                               << ncclGetLastError(nullptr);                      \
  } while (0)

class NcclShim : public GpuTest {
 protected:
  // A communicator of all ranks: rank 0 creates the id, the test bootstrap hands it out.
  ncclComm_t initAll() {
    ncclUniqueId id{};
    if (rank() == 0) EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    bootstrap().broadcast(&id, sizeof(id), 0);
    ncclComm_t c = nullptr;
    EXPECT_EQ(ncclCommInitRank(&c, worldSize(), id, rank()), ncclSuccess) << ncclGetLastError(nullptr);
    return c;
  }
  float* deviceFloats(size_t n) {
    auto& b = keep<GpuBuffer>(n * sizeof(float) + 16);
    return static_cast<float*>(b.data());
  }
  void upload(float* d, const std::vector<float>& h) { copyToDevice(d, h.data(), h.size() * sizeof(float)); }
  void poison(float* d, size_t n) { upload(d, std::vector<float>(n, NAN)); }
  std::vector<float> download(const float* d, size_t n) {
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    std::vector<float> h(n);
    MESHCOMM_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  // Input element i of rank r in case `seed`: a small integer (exact sums).
  static float value(uint64_t seed, int r, size_t i) {
    return static_cast<float>(static_cast<int>((seed * 2654435761u + r * 40503u + i * 97u) % 201) - 100);
  }
  std::vector<float> input(uint64_t seed, int r, size_t n) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = value(seed, r, i);
    return h;
  }
  // Number of elements of `got` that differ from `want` (first mismatch described in `first`).
  static size_t mismatches(const std::vector<float>& got, const std::vector<float>& want,
                           std::string* first) {
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      if (bad++ == 0)
        *first = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
                 std::to_string(want[i]);
    }
    return bad;
  }
  // An in-place float sum allreduce of N fresh inputs on `comm` whose ranks are the parent ranks `members`:
  // the result must be the sum of those members' inputs.
  void expectSumOverMembers(ncclComm_t comm, const std::vector<int>& members, size_t N) {
    float* buf = deviceFloats(N);
    const uint64_t seed = testSeed();
    upload(buf, input(seed, rank(), N));
    NCCL_OK(ncclAllReduce(buf, buf, N, ncclFloat32, ncclSum, comm, stream()));
    std::vector<float> want(N, 0.f);
    for (int q : members)
      for (size_t i = 0; i < N; ++i) want[i] += value(seed, q, i);
    std::string first;
    EXPECT_EQ(mismatches(download(buf, N), want, &first), 0u) << first;
  }

  // On a rank other than the last: shrinks `c` without the last rank (`flags`), checks the new
  // communicator's size and this rank's place in it (survivors keep their parent order), an allreduce of N
  // elements sums over the survivors only; destroys it.
  void shrinkWithoutLastThenSum(ncclComm_t c, int flags, size_t N) {
    const int n = worldSize();
    ncclComm_t sub = nullptr;
    int excluded = n - 1;
    NCCL_OK(ncclCommShrink(c, &excluded, 1, &sub, nullptr, flags));
    ASSERT_NE(sub, nullptr);
    int subCount = 0, subRank = -1;
    NCCL_OK(ncclCommCount(sub, &subCount));
    NCCL_OK(ncclCommUserRank(sub, &subRank));
    EXPECT_EQ(subCount, n - 1);
    EXPECT_EQ(subRank, rank());
    std::vector<int> survivors(n - 1);
    std::iota(survivors.begin(), survivors.end(), 0);
    expectSumOverMembers(sub, survivors, N);
    NCCL_OK(ncclCommDestroy(sub));
  }
};

TEST_F(NcclShim, EveryCollectiveMatchesTheHostReference) {
  const int n = worldSize(), me = rank();
  ncclComm_t c = initAll();
  ASSERT_NE(c, nullptr);
  int count = 0, dev = -1, r = -1;
  NCCL_OK(ncclCommCount(c, &count));
  NCCL_OK(ncclCommCuDevice(c, &dev));
  NCCL_OK(ncclCommUserRank(c, &r));
  EXPECT_EQ(count, n);
  EXPECT_EQ(dev, comm().cudaDevice());
  EXPECT_EQ(r, me);

  const size_t N = (1u << 20) + 3;  // per-rank element count (odd on purpose)
  float* in = deviceFloats(N * n);
  float* out = deviceFloats(N * n);
  const cudaStream_t s = stream();
  uint64_t seed = testSeed();
  std::string first;
  auto check = [&](const char* what, const std::vector<float>& want, const float* d) {
    const size_t bad = mismatches(download(d, want.size()), want, &first);
    EXPECT_EQ(bad, 0u) << "rank " << me << ": " << what << ": " << first;
  };

  // allreduce sum, out of place and in place
  auto allreduceBothWays = [&](const std::string& what) {
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      ++seed;
      upload(in, input(seed, me, N));
      float* dst = inPlace ? in : out;
      if (!inPlace) poison(out, N);
      NCCL_OK(ncclAllReduce(in, dst, N, ncclFloat32, ncclSum, c, s));
      std::vector<float> want(N, 0.f);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < N; ++i) want[i] += value(seed, q, i);
      check((what + (inPlace ? " in place" : "")).c_str(), want, dst);
    }
  };
  allreduceBothWays("allreduce");
  // The same on windows (collective registrations: meshcomm's zero-copy allreduce), then deregistered.
  {
    ncclWindow_t winIn = nullptr, winOut = nullptr;
    NCCL_OK(ncclCommWindowRegister(c, in, N * n * sizeof(float), &winIn, NCCL_WIN_COLL_SYMMETRIC));
    NCCL_OK(ncclCommWindowRegister(c, out, N * n * sizeof(float), &winOut, NCCL_WIN_DEFAULT));
    allreduceBothWays("allreduce on windows");
    NCCL_OK(ncclCommWindowDeregister(c, winIn));
    NCCL_OK(ncclCommWindowDeregister(c, winOut));
  }
  // Windows registered and deregistered inside groups: the work of ncclGroupEnd (a registration still waiting
  // for it cannot be deregistered).
  {
    ncclWindow_t winIn = nullptr, winOut = nullptr;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclCommWindowRegister(c, in, N * n * sizeof(float), &winIn, NCCL_WIN_COLL_SYMMETRIC));
    NCCL_OK(ncclCommWindowRegister(c, out, N * n * sizeof(float), &winOut, NCCL_WIN_DEFAULT));
    EXPECT_NE(winIn, nullptr);
    EXPECT_EQ(ncclCommWindowDeregister(c, winIn), ncclInvalidUsage);
    NCCL_OK(ncclGroupEnd());
    allreduceBothWays("allreduce on windows registered in a group");
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclCommWindowDeregister(c, winIn));
    NCCL_OK(ncclCommWindowDeregister(c, winOut));
    NCCL_OK(ncclGroupEnd());
  }
  // PreMulSum: each rank's input is multiplied by that rank's own scalar (host: q + 1, device: -(q + 1) / 2
  // on rank q), as NCCL defines it; the host handle is destroyed right after the enqueue (as nccl-tests
  // does), before the kernel has run.
  {
    ++seed;
    upload(in, input(seed, me, N));
    auto hostScalar = [](int q) { return static_cast<float>(q + 1); };
    auto deviceScalar = [](int q) { return -0.5f * static_cast<float>(q + 1); };
    ncclRedOp_t hostOp, devOp;
    float mine = hostScalar(me);
    NCCL_OK(ncclRedOpCreatePreMulSum(&hostOp, &mine, ncclFloat32, ncclScalarHostImmediate, c));
    float* devScalar = deviceFloats(1);
    upload(devScalar, {deviceScalar(me)});
    NCCL_OK(ncclRedOpCreatePreMulSum(&devOp, devScalar, ncclFloat32, ncclScalarDevice, c));
    for (bool onDevice : {false, true}) {
      poison(out, N);
      NCCL_OK(ncclAllReduce(in, out, N, ncclFloat32, onDevice ? devOp : hostOp, c, s));
      if (!onDevice) NCCL_OK(ncclRedOpDestroy(hostOp, c));
      std::vector<float> want(N, 0.f);
      for (int q = 0; q < n; ++q) {
        const float scale = onDevice ? deviceScalar(q) : hostScalar(q);
        for (size_t i = 0; i < N; ++i) want[i] += scale * value(seed, q, i);
      }
      check(onDevice ? "premulsum device scalar" : "premulsum host scalar", want, out);
    }
    NCCL_OK(ncclRedOpDestroy(devOp, c));
    EXPECT_EQ(ncclRedOpDestroy(hostOp, c), ncclInvalidArgument);  // already destroyed
  }
  // allgather, reducescatter, alltoall
  {
    ++seed;
    upload(in, input(seed, me, N * n));
    poison(out, N * n);
    NCCL_OK(ncclAllGather(in, out, N, ncclFloat32, c, s));
    std::vector<float> want(N * n);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < N; ++i) want[q * N + i] = value(seed, q, i);
    check("allgather", want, out);

    poison(out, N);
    NCCL_OK(ncclReduceScatter(in, out, N, ncclFloat32, ncclMax, c, s));
    std::vector<float> rs(N, -1e30f);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < N; ++i) rs[i] = std::max(rs[i], value(seed, q, me * N + i));
    check("reducescatter max", rs, out);

    poison(out, N * n);
    NCCL_OK(ncclAlltoAll(in, out, N, ncclFloat32, c, s));
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < N; ++i) want[q * N + i] = value(seed, q, me * N + i);
    check("alltoall", want, out);
  }
  // rooted: broadcast, bcast in place, reduce, gather, scatter
  for (int root = 0; root < n; root += (n > 2 ? n - 1 : 1)) {
    ++seed;
    upload(in, input(seed, me, N * n));
    poison(out, N);
    NCCL_OK(ncclBroadcast(in, out, N, ncclFloat32, root, c, s));
    std::vector<float> bc(N);
    for (size_t i = 0; i < N; ++i) bc[i] = value(seed, root, i);
    check("broadcast", bc, out);
    NCCL_OK(ncclBcast(in, N, ncclFloat32, root, c, s));
    check("bcast in place", bc, in);

    upload(in, input(seed + 1, me, N * n));
    poison(out, N * n);
    NCCL_OK(ncclReduce(in, out, N, ncclFloat32, ncclSum, root, c, s));
    if (me == root) {
      std::vector<float> red(N, 0.f);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < N; ++i) red[i] += value(seed + 1, q, i);
      check("reduce", red, out);
    }
    poison(out, N * n);
    NCCL_OK(ncclGather(in, out, N, ncclFloat32, root, c, s));
    if (me == root) {
      std::vector<float> g(N * n);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < N; ++i) g[q * N + i] = value(seed + 1, q, i);
      check("gather", g, out);
    }
    poison(out, N);
    NCCL_OK(ncclScatter(in, out, N, ncclFloat32, root, c, s));
    std::vector<float> sc(N);
    for (size_t i = 0; i < N; ++i) sc[i] = value(seed + 1, root, me * N + i);
    check("scatter", sc, out);
  }
  // send/recv ring in one group
  {
    ++seed;
    upload(in, input(seed, me, N));
    poison(out, N);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(in, N, ncclFloat32, (me + 1) % n, c, s));
    NCCL_OK(ncclRecv(out, N, ncclFloat32, (me + n - 1) % n, c, s));
    NCCL_OK(ncclGroupEnd());
    check("send/recv ring", input(seed, (me + n - 1) % n, N), out);
  }
  // argument errors name the problem
  EXPECT_EQ(ncclAllReduce(in, out, N, static_cast<ncclDataType_t>(99), ncclSum, c, s), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("datatype"), std::string::npos) << ncclGetLastError(c);
  EXPECT_NE(ncclAllReduce(in, out, N, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 7), c, s),
            ncclSuccess);

  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(c, &async));
  EXPECT_EQ(async, ncclSuccess);
  NCCL_OK(ncclCommFinalize(c));
  NCCL_OK(ncclCommDestroy(c));
}

TEST_F(NcclShim, SplitByParityThenAbort) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank();
  ncclComm_t c = initAll();
  ASSERT_NE(c, nullptr);
  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommSplit(c, me % 2, -me, &sub, nullptr));  // key -rank: reversed order inside each color
  ASSERT_NE(sub, nullptr);
  int subCount = 0, subRank = -1;
  NCCL_OK(ncclCommCount(sub, &subCount));
  NCCL_OK(ncclCommUserRank(sub, &subRank));
  std::vector<int> members;
  for (int q = 0; q < n; ++q)
    if (q % 2 == me % 2) members.push_back(q);
  EXPECT_EQ(subCount, static_cast<int>(members.size()));
  EXPECT_EQ(subRank, static_cast<int>(members.size()) - 1 - me / 2);

  expectSumOverMembers(sub, members, 4099);

  ncclComm_t none = reinterpret_cast<ncclComm_t>(1);
  NCCL_OK(ncclCommSplit(c, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr));
  EXPECT_EQ(none, nullptr);

  NCCL_OK(ncclCommAbort(sub));  // returns without waiting for the peers
  NCCL_OK(ncclCommDestroy(c));
}

// ncclCommShrink without the last rank: argument errors first (no communication), then the survivors shrink
// and allreduce on the new communicator (sum over the survivors only); every parent rank, the excluded one
// too, destroys the parent normally (NCCL_SHRINK_DEFAULT keeps the parent healthy).
TEST_F(NcclShim, ShrinkWithoutTheLastRank) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank(), gone = n - 1;
  ncclComm_t c = initAll();
  ASSERT_NE(c, nullptr);
  ncclComm_t sub = nullptr;
  int self = me, outside = n;
  EXPECT_EQ(ncclCommShrink(c, &self, 1, &sub, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("the calling rank"), std::string::npos)
      << ncclGetLastError(c);
  EXPECT_EQ(ncclCommShrink(c, &outside, 1, &sub, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("is not a rank of"), std::string::npos)
      << ncclGetLastError(c);
  EXPECT_EQ(ncclCommShrink(c, nullptr, 0, &sub, nullptr, 7), ncclInvalidArgument);
  EXPECT_EQ(sub, nullptr);

  if (me != gone) shrinkWithoutLastThenSum(c, NCCL_SHRINK_DEFAULT, 3001);
  NCCL_OK(ncclCommDestroy(c));
}

// NCCL_SHRINK_ABORT as error recovery: the last rank stops taking part (it never joins the survivors'
// allreduce on the parent, which therefore cannot finish); the survivors shrink with NCCL_SHRINK_ABORT, which
// releases the stuck kernel, run the allreduce on the new communicator, and destroy the parent without
// waiting for the missing rank (ncclCommDestroy of a parent shrunk with abort skips the teardown agreement).
TEST_F(NcclShim, ShrinkAbortRecoversFromAMissingRank) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank(), gone = n - 1;
  ncclComm_t c = initAll();
  ASSERT_NE(c, nullptr);
  const size_t N = 2053;
  if (me == gone) {
    NCCL_OK(ncclCommAbort(c));  // leaves without the agreement: as a rank that failed
    return;
  }
  float* stuck = deviceFloats(N);
  NCCL_OK(ncclAllReduce(stuck, stuck, N, ncclFloat32, ncclSum, c, stream()));  // rank `gone` never joins
  shrinkWithoutLastThenSum(c, NCCL_SHRINK_ABORT, N);
  const auto t0 = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommDestroy(c));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10))
      << "destroying an aborted parent waited for the missing rank";
}

// ncclCommInitRankScalable with several ids, created as NCCL documents (id i by the first rank of its block
// of ranks) and then all by rank 0 (as some frameworks do): the communicator is the one a single id gives (an
// allreduce over all ranks is right), and afterwards the roots of the ids no rank bootstraps through are gone
// (joining one fails) instead of waiting for MESHCOMM_BOOTSTRAP_TIMEOUT with a thread and a socket.
TEST_F(NcclShim, ScalableInitWithSeveralIdsThenAllReduce) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank(), nId = std::min(n, 3);
  std::vector<int> everyone(n);
  std::iota(everyone.begin(), everyone.end(), 0);
  for (bool creatorsAsNcclDocuments : {true, false}) {
    SCOPED_TRACE(creatorsAsNcclDocuments ? "ids created by the first rank of each block"
                                         : "ids created by rank 0");
    std::vector<ncclUniqueId> ids(nId);
    std::vector<int> creator(nId, 0);
    for (int i = 0; i < nId; ++i) {
      if (creatorsAsNcclDocuments) creator[i] = i * (n / nId) + std::min(i, n % nId);
      if (me == creator[i]) NCCL_OK(ncclGetUniqueId(&ids[i]));
      bootstrap().broadcast(&ids[i], sizeof(ncclUniqueId), creator[i]);
    }
    ncclComm_t c = nullptr;
    NCCL_OK(ncclCommInitRankScalable(&c, n, me, nId, ids.data(), nullptr));
    ASSERT_NE(c, nullptr);
    int count = 0, r = -1;
    NCCL_OK(ncclCommCount(c, &count));
    NCCL_OK(ncclCommUserRank(c, &r));
    EXPECT_EQ(count, n);
    EXPECT_EQ(r, me);
    expectSumOverMembers(c, everyone, 4099);
    bootstrap().barrier();  // every rank is initialized: every root has been used or ended
    for (int i = 1; i < nId; ++i) {
      if (me != creator[i]) continue;  // the process that hosted the root looks
      UniqueId uid;
      std::memcpy(uid.bytes.data(), ids[i].internal, NCCL_UNIQUE_ID_BYTES);
      EXPECT_THROW(TcpBootstrap(0, 1, uid, 2.0), Error)
          << "the root of commIds[" << i << "] still accepts ranks";
    }
    NCCL_OK(ncclCommDestroy(c));
  }
}

// ncclCommRevoke as error recovery: the last rank never joins an allreduce that the others have in flight.
// Every rank revokes: the stuck kernels exit (well before the device timeout) and the stream is idle when the
// call returns; the revoke's own abort is no async error; operations on the communicator then fail with
// ncclInvalidUsage naming the function and "revoked", ncclCommFinalize too; the revoked communicator still
// splits and shrinks into communicators whose allreduce is right, and destroying it does not wait for peers.
TEST_F(NcclShim, RevokeStopsInFlightWorkThenSplitAndShrinkStillWork) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank(), last = n - 1;
  const cudaStream_t s = stream();
  ncclComm_t c = initAll();
  ASSERT_NE(c, nullptr);
  const size_t N = 2053;
  float* buf = deviceFloats(N);
  if (me != last) NCCL_OK(ncclAllReduce(buf, buf, N, ncclFloat32, ncclSum, c, s));  // cannot finish
  auto t0 = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10))
      << "revoke waited for the device timeout instead of stopping the kernel";
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess) << "work of the revoked communicator is still running";
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(c, &async));
  EXPECT_EQ(async, ncclSuccess) << ncclGetLastError(c);
  NCCL_OK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT));  // already revoked: nothing left to do
  EXPECT_EQ(ncclCommRevoke(c, 1), ncclInvalidArgument);

  auto expectRevoked = [&](ncclResult_t r, const char* fn) {
    EXPECT_EQ(r, ncclInvalidUsage) << fn;
    const std::string text = ncclGetLastError(c);
    EXPECT_NE(text.find(fn), std::string::npos) << text;
    EXPECT_NE(text.find("revoked"), std::string::npos) << text;
  };
  expectRevoked(ncclAllReduce(buf, buf, N, ncclFloat32, ncclSum, c, s), "ncclAllReduce");
  expectRevoked(ncclBroadcast(buf, buf, N, ncclFloat32, 0, c, s), "ncclBroadcast");
  expectRevoked(ncclSend(buf, N, ncclFloat32, (me + 1) % n, c, s), "ncclSend");
  void* handle = nullptr;
  expectRevoked(ncclCommRegister(c, buf, N * sizeof(float), &handle), "ncclCommRegister");
  ncclWindow_t win = nullptr;
  expectRevoked(ncclCommWindowRegister(c, buf, N * sizeof(float), &win, NCCL_WIN_DEFAULT),
                "ncclCommWindowRegister");
  expectRevoked(ncclCommFinalize(c), "ncclCommFinalize");

  ncclComm_t sub = nullptr;
  NCCL_OK(ncclCommSplit(c, me % 2, me, &sub, nullptr));
  ASSERT_NE(sub, nullptr);
  std::vector<int> sameParity;
  for (int q = 0; q < n; ++q)
    if (q % 2 == me % 2) sameParity.push_back(q);
  expectSumOverMembers(sub, sameParity, 4099);
  NCCL_OK(ncclCommDestroy(sub));

  if (me != last) shrinkWithoutLastThenSum(c, NCCL_SHRINK_DEFAULT, 3001);
  t0 = std::chrono::steady_clock::now();
  NCCL_OK(ncclCommDestroy(c));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10))
      << "destroying a revoked communicator waited for its peers";
}

// ncclGroupSimulateEnd: a group of allreduces and a send/recv ring gets a positive estimate that grows with a
// second allreduce, and nothing runs (the stream stays idle, the outputs keep their poison, the input is
// unchanged); the same group ended with ncclGroupEnd then gives the right results.
TEST_F(NcclShim, GroupSimulateEndLaunchesNothingThenTheNextGroupRuns) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank();
  const cudaStream_t s = stream();
  ncclComm_t c = initAll();
  ASSERT_NE(c, nullptr);
  const size_t N = (1u << 18) + 5;
  float* in = deviceFloats(N);
  float* out = deviceFloats(N);
  float* ring = deviceFloats(N);
  const uint64_t seed = testSeed();
  upload(in, input(seed, me, N));
  poison(out, N);
  poison(ring, N);
  auto openGroup = [&](int allreduces) {
    NCCL_OK(ncclGroupStart());
    for (int k = 0; k < allreduces; ++k) NCCL_OK(ncclAllReduce(in, out, N, ncclFloat32, ncclSum, c, s));
    NCCL_OK(ncclSend(in, N, ncclFloat32, (me + 1) % n, c, s));
    NCCL_OK(ncclRecv(ring, N, ncclFloat32, (me + n - 1) % n, c, s));
  };
  ncclSimInfo_t one = NCCL_SIM_INFO_INITIALIZER, two = NCCL_SIM_INFO_INITIALIZER;
  openGroup(1);
  NCCL_OK(ncclGroupSimulateEnd(&one));
  openGroup(2);
  NCCL_OK(ncclGroupSimulateEnd(&two));
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess) << "ncclGroupSimulateEnd enqueued work";
  EXPECT_TRUE(std::isfinite(one.estimatedTime));
  EXPECT_GT(one.estimatedTime, 0.f);
  EXPECT_LT(one.estimatedTime, 1e4f) << "1 MiB allreduce and a 1 MiB ring estimated above 10 ms";
  EXPECT_GT(two.estimatedTime, one.estimatedTime) << "a second allreduce added nothing";

  auto expectUntouched = [&](const float* d, const char* what) {
    size_t written = 0;
    for (float v : download(d, N)) written += std::isnan(v) ? 0 : 1;
    EXPECT_EQ(written, 0u) << what << ": the simulated group wrote into it";
  };
  expectUntouched(out, "allreduce output");
  expectUntouched(ring, "ring receive buffer");
  std::string first;
  EXPECT_EQ(mismatches(download(in, N), input(seed, me, N), &first), 0u) << "input changed: " << first;

  openGroup(1);
  NCCL_OK(ncclGroupEnd());
  std::vector<float> sum(N, 0.f);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < N; ++i) sum[i] += value(seed, q, i);
  EXPECT_EQ(mismatches(download(out, N), sum, &first), 0u) << "allreduce after the simulation: " << first;
  EXPECT_EQ(mismatches(download(ring, N), input(seed, (me + n - 1) % n, N), &first), 0u)
      << "ring after the simulation: " << first;
  NCCL_OK(ncclCommDestroy(c));
}

// ncclCommInitAll over every GPU of this machine, in rank 0's process only (the other ranks have nothing to
// do): collectives and a send/recv ring in one group from one thread, then one thread per GPU, then every
// communicator destroyed in turn by this thread (which must not wait for the ones not yet destroyed).
TEST_F(NcclShim, InitAllDrivesEveryLocalGpuFromOneThreadAndFromOneThreadEach) {
  if (rank() != 0) return;
  int ndev = 0;
  MESHCOMM_CUDA_CHECK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) GTEST_SKIP() << "needs 2 GPUs in one process, this machine has " << ndev;
  std::vector<ncclComm_t> comms(ndev, nullptr);
  NCCL_OK(ncclCommInitAll(comms.data(), ndev, nullptr));
  const size_t N = (1u << 18) + 7;
  std::vector<float*> buf(ndev, nullptr), ring(ndev, nullptr);
  std::vector<cudaStream_t> streams(ndev, nullptr);
  int saved = 0;
  MESHCOMM_CUDA_CHECK(cudaGetDevice(&saved));
  for (int d = 0; d < ndev; ++d) {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(d));
    MESHCOMM_CUDA_CHECK(cudaMalloc(&buf[d], N * sizeof(float)));
    MESHCOMM_CUDA_CHECK(cudaMalloc(&ring[d], N * sizeof(float)));
    MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
  }
  auto fill = [&](uint64_t seed) {
    for (int d = 0; d < ndev; ++d) {
      MESHCOMM_CUDA_CHECK(cudaSetDevice(d));
      upload(buf[d], input(seed, d, N));
      poison(ring[d], N);
    }
  };
  auto expectSum = [&](uint64_t seed, const char* what) {
    std::vector<float> want(N, 0.f);
    for (int q = 0; q < ndev; ++q)
      for (size_t i = 0; i < N; ++i) want[i] += value(seed, q, i);
    for (int d = 0; d < ndev; ++d) {
      MESHCOMM_CUDA_CHECK(cudaSetDevice(d));
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(streams[d]));
      std::string first;
      EXPECT_EQ(mismatches(download(buf[d], N), want, &first), 0u)
          << what << ", device " << d << ": " << first;
    }
  };

  // One thread, one group: an allreduce on every communicator and a send/recv ring.
  uint64_t seed = testSeed();
  fill(seed);
  NCCL_OK(ncclGroupStart());
  for (int d = 0; d < ndev; ++d) {
    NCCL_OK(ncclSend(buf[d], N, ncclFloat32, (d + 1) % ndev, comms[d], streams[d]));
    NCCL_OK(ncclRecv(ring[d], N, ncclFloat32, (d + ndev - 1) % ndev, comms[d], streams[d]));
  }
  NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclGroupStart());
  for (int d = 0; d < ndev; ++d)
    NCCL_OK(ncclAllReduce(buf[d], buf[d], N, ncclFloat32, ncclSum, comms[d], streams[d]));
  NCCL_OK(ncclGroupEnd());
  expectSum(seed, "one thread, grouped allreduce");
  for (int d = 0; d < ndev; ++d) {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(d));
    std::string first;
    EXPECT_EQ(mismatches(download(ring[d], N), input(seed, (d + ndev - 1) % ndev, N), &first), 0u)
        << "one thread, send/recv ring, device " << d << ": " << first;
  }

  // One thread registers a window on every communicator in one group (nccl-tests -R 2), runs a grouped
  // allreduce on them and deregisters them in another group: each is collective over the communicators this
  // thread holds, so ncclGroupEnd does them for all at once.
  {
    std::vector<ncclWindow_t> windows(ndev, nullptr);
    fill(++seed);
    NCCL_OK(ncclGroupStart());
    for (int d = 0; d < ndev; ++d)
      NCCL_OK(
          ncclCommWindowRegister(comms[d], buf[d], N * sizeof(float), &windows[d], NCCL_WIN_COLL_SYMMETRIC));
    NCCL_OK(ncclGroupEnd());
    NCCL_OK(ncclGroupStart());
    for (int d = 0; d < ndev; ++d)
      NCCL_OK(ncclAllReduce(buf[d], buf[d], N, ncclFloat32, ncclSum, comms[d], streams[d]));
    NCCL_OK(ncclGroupEnd());
    expectSum(seed, "one thread, grouped allreduce on windows registered in a group");
    NCCL_OK(ncclGroupStart());
    for (int d = 0; d < ndev; ++d) NCCL_OK(ncclCommWindowDeregister(comms[d], windows[d]));
    NCCL_OK(ncclGroupEnd());
  }

  // One thread per GPU, each calling on its own communicator.
  fill(++seed);
  std::vector<ncclResult_t> results(ndev, ncclSuccess);
  std::vector<std::thread> threads;
  for (int d = 0; d < ndev; ++d) {
    threads.emplace_back([&, d] {
      if (cudaSetDevice(d) != cudaSuccess) {
        results[d] = ncclUnhandledCudaError;
        return;
      }
      results[d] = ncclAllReduce(buf[d], buf[d], N, ncclFloat32, ncclSum, comms[d], streams[d]);
    });
  }
  for (auto& t : threads) t.join();
  for (int d = 0; d < ndev; ++d) EXPECT_EQ(results[d], ncclSuccess) << "thread of device " << d;
  expectSum(seed, "one thread per GPU");

  // Destroyed in turn by one thread: each call returns without waiting for the others (NCCL semantics).
  const auto t0 = std::chrono::steady_clock::now();
  for (int d = 0; d < ndev; ++d) NCCL_OK(ncclCommDestroy(comms[d]));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 20.0) << "destroying the local communicators one after the other took " << secs << " s";
  for (int d = 0; d < ndev; ++d) {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(d));
    MESHCOMM_CUDA_CHECK(cudaStreamDestroy(streams[d]));
    MESHCOMM_CUDA_CHECK(cudaFree(buf[d]));
    MESHCOMM_CUDA_CHECK(cudaFree(ring[d]));
  }
  MESHCOMM_CUDA_CHECK(cudaSetDevice(saved));
}

}  // namespace
}  // namespace meshcomm::test
