// The NCCL-API shim's pure translations (src/nccl/nccl_types.*: types, checks, which rank creates each
// scalable id, the simulation cost model) and the C entry points that need no GPU: version, error texts,
// argument errors with ncclGetLastError, group nesting, ncclGroupSimulateEnd of an empty group.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/nccl.h"
#include "nccl/nccl_types.hpp"

namespace meshcomm::nccl {
namespace {

TEST(NcclShimTypes, EveryNcclDataTypeMapsToTheSameWidth) {
  struct Case {
    int nccl;
    DataType want;
    size_t bytes;
  };
  const Case cases[] = {{ncclInt8, DataType::I8, 1},           {ncclUint8, DataType::U8, 1},
                        {ncclInt32, DataType::I32, 4},         {ncclUint32, DataType::U32, 4},
                        {ncclInt64, DataType::I64, 8},         {ncclUint64, DataType::U64, 8},
                        {ncclFloat16, DataType::F16, 2},       {ncclFloat32, DataType::F32, 4},
                        {ncclFloat64, DataType::F64, 8},       {ncclBfloat16, DataType::BF16, 2},
                        {ncclFloat8e4m3, DataType::F8E4M3, 1}, {ncclFloat8e5m2, DataType::F8E5M2, 1}};
  for (const Case& c : cases) {
    const auto d = dataTypeOf(c.nccl);
    ASSERT_TRUE(d.has_value()) << c.nccl;
    EXPECT_EQ(*d, c.want) << c.nccl;
    EXPECT_EQ(dataTypeSize(*d), c.bytes) << c.nccl;
  }
  EXPECT_FALSE(dataTypeOf(ncclNumTypes).has_value());
  EXPECT_FALSE(dataTypeOf(-1).has_value());
}

TEST(NcclShimTypes, BuiltinOperatorsAndNothingElse) {
  EXPECT_EQ(builtinOpOf(ncclSum), ReduceOp::Sum);
  EXPECT_EQ(builtinOpOf(ncclProd), ReduceOp::Prod);
  EXPECT_EQ(builtinOpOf(ncclMax), ReduceOp::Max);
  EXPECT_EQ(builtinOpOf(ncclMin), ReduceOp::Min);
  EXPECT_EQ(builtinOpOf(ncclAvg), ReduceOp::Avg);
  EXPECT_FALSE(builtinOpOf(ncclNumOps).has_value());  // the first PreMulSum handle
  EXPECT_FALSE(builtinOpOf(-3).has_value());
}

TEST(NcclShimTypes, ErrorCodesMapToNcclResults) {
  EXPECT_EQ(resultOf(ErrorCode::InvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(resultOf(ErrorCode::SystemError), ncclSystemError);
  EXPECT_EQ(resultOf(ErrorCode::CudaError), ncclUnhandledCudaError);
  EXPECT_EQ(resultOf(ErrorCode::Timeout), ncclRemoteError);
  EXPECT_EQ(resultOf(ErrorCode::RemoteError), ncclRemoteError);
  EXPECT_EQ(resultOf(ErrorCode::InternalError), ncclInternalError);
  for (int r = 0; r <= ncclNumResults; ++r)
    EXPECT_GT(std::strlen(resultText(static_cast<ncclResult_t>(r))), 0u);
}

TEST(NcclShimTypes, PreMulSumScalarsDecodeExactly) {
  auto dec = [](auto raw, DataType t) { return elementToDouble(&raw, t); };
  EXPECT_EQ(dec(uint16_t{0x3C00}, DataType::F16), 1.0);
  EXPECT_EQ(dec(uint16_t{0xC000}, DataType::F16), -2.0);
  EXPECT_EQ(dec(uint16_t{0x0001}, DataType::F16), std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(dec(uint16_t{0x3F80}, DataType::BF16), 1.0);
  EXPECT_EQ(dec(uint16_t{0x4040}, DataType::BF16), 3.0);
  EXPECT_EQ(dec(uint8_t{0x38}, DataType::F8E4M3), 1.0);
  EXPECT_EQ(dec(uint8_t{0x7E}, DataType::F8E4M3), 448.0);  // largest finite e4m3
  EXPECT_TRUE(std::isnan(dec(uint8_t{0x7F}, DataType::F8E4M3)));
  EXPECT_EQ(dec(uint8_t{0x3C}, DataType::F8E5M2), 1.0);
  EXPECT_EQ(dec(uint8_t{0xC0}, DataType::F8E5M2), -2.0);
  EXPECT_EQ(dec(0.5f, DataType::F32), 0.5);
  EXPECT_EQ(dec(-0.25, DataType::F64), -0.25);
  EXPECT_EQ(dec(int8_t{-7}, DataType::I8), -7.0);
  EXPECT_EQ(dec(uint32_t{4000000000u}, DataType::U32), 4e9);
  EXPECT_EQ(dec(int64_t{-5}, DataType::I64), -5.0);
}

TEST(NcclShimTypes, ConfigChecks) {
  ncclConfig_t ok = NCCL_CONFIG_INITIALIZER;
  EXPECT_EQ(configProblem(&ok), "");
  EXPECT_EQ(configProblem(nullptr), "");
  ncclConfig_t bad = ok;
  bad.magic = 0;
  EXPECT_NE(configProblem(&bad).find("NCCL_CONFIG_INITIALIZER"), std::string::npos);
  bad = ok;
  bad.blocking = 2;
  EXPECT_NE(configProblem(&bad).find("blocking"), std::string::npos);
  bad = ok;
  bad.blocking = 0;  // non-blocking: supported (initialization completes before the call returns)
  EXPECT_EQ(configProblem(&bad), "");
}

TEST(NcclShimTypes, SimInfoChecks) {
  ncclSimInfo_t ok = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(simInfoProblem(&ok), "");
  EXPECT_NE(simInfoProblem(nullptr).find("NULL"), std::string::npos);
  ncclSimInfo_t bad = ok;
  bad.magic = NCCL_CONFIG_MAGIC;  // another struct's magic
  EXPECT_NE(simInfoProblem(&bad).find("NCCL_SIM_INFO_INITIALIZER"), std::string::npos);
  bad = ok;
  bad.size = sizeof(size_t);
  EXPECT_NE(simInfoProblem(&bad).find("size"), std::string::npos);
  bad = ok;
  bad.version = NCCL_VERSION(2, 21, 5);
  EXPECT_NE(simInfoProblem(&bad).find("version"), std::string::npos);
}

// NCCL's documentation gives this test for "does `rank` create one of the nIds ids" (blocks of consecutive
// ranks, the first nRanks % nIds one larger); scalableIdCreator must name exactly those ranks, in order.
TEST(NcclShimTypes, ScalableIdCreatorsAreTheRanksNcclDocuments) {
  auto rankHasRoot = [](int rank, int nRanks, int nIds) {
    const int rmr = nRanks % nIds, rpr = nRanks / nIds, rlim = rmr * (rpr + 1);
    return rank < rlim ? rank % (rpr + 1) == 0 : (rank - rlim) % rpr == 0;
  };
  for (int nRanks = 1; nRanks <= 40; ++nRanks) {
    for (int nIds = 1; nIds <= nRanks; ++nIds) {
      std::set<int> documented, ours;
      for (int r = 0; r < nRanks; ++r)
        if (rankHasRoot(r, nRanks, nIds)) documented.insert(r);
      int previous = -1;
      for (int i = 0; i < nIds; ++i) {
        const int c = scalableIdCreator(i, nRanks, nIds);
        EXPECT_GT(c, previous) << nRanks << " ranks, " << nIds << " ids, id " << i;
        previous = c;
        ours.insert(c);
      }
      EXPECT_EQ(ours, documented) << nRanks << " ranks, " << nIds << " ids";
    }
  }
  EXPECT_EQ(scalableIdCreator(1, 7, 3), 3);  // NCCL's example: ranks 0-2, 3-4, 5-6
  EXPECT_EQ(scalableIdCreator(2, 7, 3), 5);
}

// The model reproduces the 4x H200 measurements it was fitted to (bench/results/2026-11-22-h200x4-
// collectives-ll-kernel-tails.json, meshcomm-bench out of place; reduce_direct: -reduce-direct.json;
// allgather_ll and alltoall_ll: 2026-11-22-h200x4-ll-packet-per-thread.md), falls back to the
// large-message algorithm of the collective for algorithms without measurements, and grows with the bytes.
TEST(NcclShimTypes, LaunchEstimatesFollowTheMeasuredModel) {
  struct Row {
    Collective c;
    const char* algorithm;
    size_t bytes;
    double measuredUs;
  };
  const Row rows[] = {{Collective::AllReduce, "allreduce_oneshot_ll", 1024, 5.75},
                      {Collective::AllReduce, "allreduce_rsag", 1073741824, 4647.35},
                      {Collective::AllGather, "allgather_ll", 1048576, 8.44},
                      {Collective::AllGather, "allgather_scratch", 16777216, 53.36},
                      {Collective::AllToAll, "alltoall_ll", 65536, 3.59},
                      {Collective::ReduceScatter, "reduce_scatter_ll", 65536, 6.87},
                      {Collective::AllToAll, "alltoall_scratch", 268435456, 613.31},
                      {Collective::Broadcast, "broadcast_chain", 67108864, 201.24},
                      {Collective::Reduce, "reduce_chain", 4194304, 22.85},
                      {Collective::Reduce, "reduce_direct", 262144, 6.90},
                      {Collective::Gather, "gather_scratch", 1073741824, 2171.19},
                      {Collective::Scatter, "scatter_ll", 262144, 4.38},
                      {Collective::Gather, "gather_stream", 4194304, 11.94},
                      {Collective::Scatter, "scatter_stream", 16384, 3.55},
                      {Collective::SendRecv, "sendrecv_ll", 268435456, 770.37}};
  for (const Row& r : rows) {
    const double us = estimateLaunchMicroseconds(r.c, r.algorithm, r.bytes, 4);
    EXPECT_NEAR(us, r.measuredUs, 0.15 * r.measuredUs) << r.algorithm << " " << r.bytes << " B";
  }
  EXPECT_EQ(estimateLaunchMicroseconds(Collective::AllReduce, "allreduce_zerocopy", 1 << 20, 4),
            estimateLaunchMicroseconds(Collective::AllReduce, "allreduce_rsag", 1 << 20, 4));
  EXPECT_EQ(estimateLaunchMicroseconds(Collective::AllReduce, "allreduce_rsag", 1 << 30, 1),
            estimateLaunchMicroseconds(Collective::AllReduce, "allreduce_rsag", 0, 1));  // no traffic alone
  EXPECT_GT(estimateLaunchMicroseconds(Collective::Barrier, "barrier_channels", 0, 4), 0.0);
  double last = 0;
  for (size_t bytes = 1; bytes <= (size_t{1} << 30); bytes *= 4) {
    const double us = estimateLaunchMicroseconds(Collective::AllGather, "allgather_ll", bytes, 8);
    EXPECT_GT(us, last) << bytes;
    last = us;
  }
}

TEST(NcclShimApi, VersionErrorsAndGroupsWithoutAGpu) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, 22809);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("version is NULL"), std::string::npos);

  int count = 0;
  EXPECT_EQ(ncclCommCount(nullptr, &count), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclAllReduce"), std::string::npos);

  ncclComm_t comm = nullptr;
  ncclUniqueId id{};
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 5), ncclInvalidArgument);  // rank out of range
  EXPECT_EQ(comm, nullptr);

  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // nothing open
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
}

// Every argument error of ncclCommInitRankScalable is found before any id is used (no network, no GPU) and
// names the rank, the function and the argument.
TEST(NcclShimApi, ScalableInitRejectsBadArgumentsByName) {
  ncclUniqueId ids[3];
  for (int i = 0; i < 3; ++i)
    std::memset(ids[i].internal, 'a' + i, NCCL_UNIQUE_ID_BYTES);  // distinct, not ours
  ncclComm_t comm = nullptr;
  auto expectError = [&](ncclResult_t got, ncclResult_t want, const char* text) {
    EXPECT_EQ(got, want) << text;
    const std::string last = ncclGetLastError(nullptr);
    EXPECT_NE(last.find("rank 1: ncclCommInitRankScalable"), std::string::npos) << last;
    EXPECT_NE(last.find(text), std::string::npos) << last;
  };
  expectError(ncclCommInitRankScalable(&comm, 4, 1, 0, ids, nullptr), ncclInvalidArgument, "nId 0");
  expectError(ncclCommInitRankScalable(&comm, 2, 1, 3, ids, nullptr), ncclInvalidArgument, "nId 3");
  expectError(ncclCommInitRankScalable(&comm, 4, 1, 2, nullptr, nullptr), ncclInvalidArgument,
              "commIds is NULL");
  expectError(ncclCommInitRankScalable(nullptr, 4, 1, 2, ids, nullptr), ncclInvalidArgument,
              "newcomm is NULL");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  expectError(ncclCommInitRankScalable(&comm, 4, 1, 2, ids, &config), ncclInvalidArgument,
              "NCCL_CONFIG_INITIALIZER");
  ncclUniqueId twice[3] = {ids[0], ids[1], ids[0]};
  expectError(ncclCommInitRankScalable(&comm, 4, 1, 3, twice, nullptr), ncclInvalidArgument,
              "commIds[0] and commIds[2] are the same id");
  expectError(ncclCommInitRankScalable(&comm, 4, 1, 3, ids, nullptr), ncclInvalidUsage,
              "commIds[0]: the UniqueId is not a meshcomm id");
  EXPECT_EQ(comm, nullptr);
}

// What ncclCommInitRankScalable relies on to end the roots of the ids no rank bootstraps through: joining the
// root of a fresh ncclGetUniqueId id as the only rank of a one-rank job completes it, and the root is gone at
// once (a later join is refused) instead of listening until MESHCOMM_BOOTSTRAP_TIMEOUT.
TEST(NcclShimApi, AOneRankJoinEndsTheRootOfAnUnusedId) {
  ncclUniqueId nid;
  ASSERT_EQ(ncclGetUniqueId(&nid), ncclSuccess) << ncclGetLastError(nullptr);
  UniqueId id;
  std::memcpy(id.bytes.data(), nid.internal, NCCL_UNIQUE_ID_BYTES);
  { TcpBootstrap alone(0, 1, id, 10.0); }
  EXPECT_THROW(TcpBootstrap(0, 1, id, 1.0), Error) << "the root still accepts ranks";
}

TEST(NcclShimApi, RevokeAndSimulateArgumentErrorsWithoutAGpu) {
  EXPECT_EQ(ncclCommRevoke(nullptr, NCCL_REVOKE_DEFAULT), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclCommRevoke"), std::string::npos);

  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);  // nothing open
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("no ncclGroupStart"), std::string::npos);

  // A bad simInfo is refused and leaves the group open: the next end closes it.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ncclSimInfo_t bad = sim;
  bad.magic = 0;
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NCCL_SIM_INFO_INITIALIZER"), std::string::npos);
  EXPECT_EQ(ncclGroupSimulateEnd(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);

  // Nested: only the outermost end simulates; an empty group costs nothing.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_EQ(sim.estimatedTime, NCCL_UNDEF_FLOAT);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_EQ(sim.estimatedTime, 0.0f);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
}

}  // namespace
}  // namespace meshcomm::nccl

// Every function of the header is exported, under its name and NCCL's profiling name (pnccl*), which is the
// same code.
TEST(NcclShimApi, EveryFunctionIsExportedUnderItsProfilingNameToo) {
  void* lib = dlopen("libmeshcomm_nccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "the test links libmeshcomm_nccl.so.2: " << dlerror();
  int functions = 0;
#define EXPECT_EXPORTED_TWICE(fn)                                                   \
  {                                                                                 \
    void* plain = dlsym(lib, #fn);                                                  \
    void* profiling = dlsym(lib, "p" #fn);                                          \
    EXPECT_NE(plain, nullptr) << #fn;                                               \
    EXPECT_EQ(profiling, plain) << "p" #fn;                                         \
    EXPECT_EQ(plain, reinterpret_cast<void*>(&fn)) << #fn " is not the shim's own"; \
    ++functions;                                                                    \
  }
  MESHCOMM_NCCL_FUNCTIONS(EXPECT_EXPORTED_TWICE)
#undef EXPECT_EXPORTED_TWICE
  EXPECT_EQ(functions, 40);
  dlclose(lib);
}
