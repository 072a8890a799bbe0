// The NCCL-API shim's pure translations (src/nccl/nccl_types.*) and the C entry points that need no GPU:
// version, error texts, argument errors with ncclGetLastError, group nesting.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

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
