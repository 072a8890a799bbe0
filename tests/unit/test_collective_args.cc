// CollectiveArgs sizes and in-place rules, type/collective names, and argument validation (CPU only).
#include <gtest/gtest.h>

#include <map>

#include "collectives/validation.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {
namespace {

char buf[1 << 16];  // addresses only; never dereferenced

CollectiveArgs args(Collective c, size_t count, DataType t = DataType::F32) {
  CollectiveArgs a;
  a.collective = c;
  a.count = count;
  a.dtype = t;
  a.input = buf;
  a.output = buf + 8192;
  return a;
}

TEST(TypeNames, DataTypesAndOps) {
  const char* names[kNumDataTypes] = {"float", "half",   "bfloat16", "double", "int8",   "uint8",
                                      "int32", "uint32", "int64",    "uint64", "f8e4m3", "f8e5m2"};
  const size_t sizes[kNumDataTypes] = {4, 2, 2, 8, 1, 1, 4, 4, 8, 8, 1, 1};
  const bool fp[kNumDataTypes] = {true,  true,  true,  true,  false, false,
                                  false, false, false, false, true,  true};
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    EXPECT_STREQ(dataTypeName(t), names[i]);
    EXPECT_EQ(dataTypeSize(t), sizes[i]) << names[i];
    EXPECT_EQ(isFloatingPoint(t), fp[i]) << names[i];
  }
  EXPECT_EQ(dataTypeSize(static_cast<DataType>(kNumDataTypes)), 0u);
  EXPECT_STREQ(reduceOpName(ReduceOp::Sum), "sum");
  EXPECT_STREQ(reduceOpName(ReduceOp::Prod), "prod");
  EXPECT_STREQ(reduceOpName(ReduceOp::Min), "min");
  EXPECT_STREQ(reduceOpName(ReduceOp::Max), "max");
  EXPECT_STREQ(reduceOpName(ReduceOp::Avg), "avg");
  EXPECT_STREQ(reduceOpName(ReduceOp::PreMulSum), "premulsum");
}

TEST(CollectiveNames, All) {
  const char* names[kNumCollectives] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                        "reduce",    "gather",    "scatter",        "alltoall",
                                        "alltoallv", "sendrecv",  "barrier"};
  for (int i = 0; i < kNumCollectives; ++i)
    EXPECT_STREQ(collectiveName(static_cast<Collective>(i)), names[i]);
}

// The factory the typed Comm calls and the NCCL shim build their calls with.
TEST(CollectiveArgsOf, SetsTheCallAndLeavesTheRestDefault) {
  const auto stream = reinterpret_cast<cudaStream_t>(0x10);
  const CollectiveArgs r =
      CollectiveArgs::of(Collective::Reduce, buf, buf + 64, 7, DataType::BF16, stream, ReduceOp::Max, 3);
  EXPECT_EQ(r.collective, Collective::Reduce);
  EXPECT_EQ(r.input, buf);
  EXPECT_EQ(r.output, buf + 64);
  EXPECT_EQ(r.count, 7u);
  EXPECT_EQ(r.dtype, DataType::BF16);
  EXPECT_EQ(r.op.op, ReduceOp::Max);
  EXPECT_EQ(r.root, 3);
  EXPECT_EQ(r.stream, stream);
  const CollectiveArgs g = CollectiveArgs::of(Collective::AllGather, buf, buf, 5, DataType::F32, stream);
  EXPECT_EQ(g.op.op, ReduceOp::Sum);
  EXPECT_EQ(g.root, 0);
  EXPECT_EQ(g.sendCounts, nullptr);
  EXPECT_EQ(g.p2pOps, nullptr);
  EXPECT_FALSE(g.inputSpan.registered());
  EXPECT_FALSE(g.capturing);
}

TEST(MessageBytes, NcclTestsSizes) {
  const int n = 4;
  EXPECT_EQ(args(Collective::AllReduce, 10).messageBytes(n), 40u);
  EXPECT_EQ(args(Collective::Broadcast, 10, DataType::F16).messageBytes(n), 20u);
  EXPECT_EQ(args(Collective::Reduce, 10, DataType::F64).messageBytes(n), 80u);
  EXPECT_EQ(args(Collective::AllGather, 10).messageBytes(n), 160u);
  EXPECT_EQ(args(Collective::Gather, 10).messageBytes(n), 160u);
  EXPECT_EQ(args(Collective::ReduceScatter, 10).messageBytes(n), 160u);
  EXPECT_EQ(args(Collective::Scatter, 10).messageBytes(n), 160u);
  EXPECT_EQ(args(Collective::AllToAll, 10, DataType::U8).messageBytes(n), 40u);
  EXPECT_EQ(args(Collective::Barrier, 10).messageBytes(n), 0u);
}

TEST(MessageBytes, AllToAllvAndSendRecv) {
  const size_t send[4] = {1, 2, 3, 4}, recv[4] = {5, 5, 5, 5}, displs[4] = {0, 0, 0, 0};
  CollectiveArgs a = args(Collective::AllToAllv, 0, DataType::I32);
  a.sendCounts = send, a.recvCounts = recv, a.sendDispls = displs, a.recvDispls = displs;
  EXPECT_EQ(a.messageBytes(4), 80u);  // max(10, 20) * 4
  a.countsLocation = CountsLocation::Device;
  EXPECT_EQ(a.messageBytes(4), SIZE_MAX / 2);  // unknown on the host: selection assumes a large message

  const P2POp ops[3] = {{P2POp::Send, 1, buf, 100}, {P2POp::Recv, 2, buf, 300}, {P2POp::Send, 3, buf, 7}};
  CollectiveArgs g = args(Collective::SendRecv, 0, DataType::U8);
  g.p2pOps = ops, g.numP2POps = 3;
  EXPECT_EQ(g.messageBytes(4), 300u);
}

TEST(InPlace, EveryCollective) {
  for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce, Collective::AllToAll,
                       Collective::AllToAllv}) {
    CollectiveArgs a = args(c, 16);
    EXPECT_FALSE(a.inPlace(1)) << collectiveName(c);
    a.output = const_cast<void*>(a.input);
    EXPECT_TRUE(a.inPlace(1)) << collectiveName(c);
  }
  for (Collective c : {Collective::AllGather, Collective::Gather}) {
    CollectiveArgs a = args(c, 16);  // 64 bytes per rank
    a.input = static_cast<char*>(a.output) + 2 * 64;
    EXPECT_TRUE(a.inPlace(2)) << collectiveName(c);
    EXPECT_FALSE(a.inPlace(1)) << collectiveName(c);
  }
  for (Collective c : {Collective::ReduceScatter, Collective::Scatter}) {
    CollectiveArgs a = args(c, 16);
    a.output = static_cast<char*>(const_cast<void*>(a.input)) + 3 * 64;
    EXPECT_TRUE(a.inPlace(3)) << collectiveName(c);
    EXPECT_FALSE(a.inPlace(0)) << collectiveName(c);
  }
  CollectiveArgs b = args(Collective::Barrier, 0);
  b.output = const_cast<void*>(b.input);
  EXPECT_FALSE(b.inPlace(0));
  EXPECT_FALSE(args(Collective::SendRecv, 0).inPlace(0));
}

// Pointers in `buf` are device memory of GPU 0 unless listed otherwise.
class FakePointers : public PointerQuery {
 public:
  std::map<const void*, PointerInfo> overrides;
  mutable int queries = 0;
  PointerInfo query(const void* p) const override {
    ++queries;
    auto it = overrides.find(p);
    if (it != overrides.end()) return it->second;
    const char* c = static_cast<const char*>(p);
    if (c >= buf && c < buf + sizeof(buf)) return {PointerInfo::Kind::Device, 0};
    return {};
  }
};

class Validation : public ::testing::Test {
 protected:
  FakePointers pointers;
  ValidationContext ctx{1, 4, 0, pointers};

  void expectError(const CollectiveArgs& a, const std::string& part) {
    try {
      validateCollective(ctx, collectiveName(a.collective), a);
      FAIL() << "expected an error containing " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
};

TEST_F(Validation, AcceptsGoodCalls) {
  for (int c = 0; c < kNumCollectives; ++c) {
    CollectiveArgs a = args(static_cast<Collective>(c), 8);
    const size_t counts[4] = {1, 1, 1, 1};
    a.sendCounts = a.recvCounts = a.sendDispls = a.recvDispls = counts;
    EXPECT_NO_THROW(validateCollective(ctx, collectiveName(a.collective), a)) << c;
  }
}

TEST_F(Validation, NullPointersAndCountZero) {
  CollectiveArgs a = args(Collective::AllReduce, 8);
  a.input = nullptr;
  expectError(a, "rank 1: allreduce: send: null pointer");
  a.count = 0;
  EXPECT_NO_THROW(validateCollective(ctx, "allreduce", a));
  EXPECT_TRUE(isNoOp(a));
  a = args(Collective::AllGather, 8);
  a.output = nullptr;
  expectError(a, "rank 1: allgather: recv: null pointer");
  EXPECT_FALSE(isNoOp(args(Collective::Barrier, 0)));
  EXPECT_FALSE(isNoOp(args(Collective::AllToAllv, 0)));
}

TEST_F(Validation, InPlaceCallQueriesItsBufferOnce) {
  CollectiveArgs a = args(Collective::AllReduce, 8);
  a.output = const_cast<void*>(a.input);
  pointers.queries = 0;
  EXPECT_NO_THROW(validateCollective(ctx, "allreduce", a));
  EXPECT_EQ(pointers.queries, 1);  // the host path's cost: one driver query per distinct buffer
  pointers.overrides[a.input] = {PointerInfo::Kind::Device, 2};
  expectError(a, "rank 1: allreduce: send: device memory of another GPU");
  pointers.overrides.clear();
  a = args(Collective::AllReduce, 8);
  pointers.queries = 0;
  EXPECT_NO_THROW(validateCollective(ctx, "allreduce", a));
  EXPECT_EQ(pointers.queries, 2);
}

TEST_F(Validation, RootOnlyBuffers) {
  CollectiveArgs a = args(Collective::Broadcast, 8);
  a.root = 0;
  a.input = nullptr;  // not the root: send unused
  EXPECT_NO_THROW(validateCollective(ctx, "broadcast", a));
  a.root = 1;
  expectError(a, "broadcast: send: null");
  CollectiveArgs r = args(Collective::Reduce, 8);
  r.root = 3;
  r.output = nullptr;
  EXPECT_NO_THROW(validateCollective(ctx, "reduce", r));
  r.root = 1;
  expectError(r, "reduce: recv: null");
  r.root = 4;
  expectError(r, "reduce: root: 4 out of range [0, 4)");
  r.root = -1;
  expectError(r, "root: -1 out of range");
}

TEST_F(Validation, EnumsAndPreMulSum) {
  CollectiveArgs a = args(Collective::AllReduce, 8);
  a.dtype = static_cast<DataType>(12);
  expectError(a, "allreduce: dtype: not a DataType");
  a = args(Collective::AllReduce, 8);
  a.op = ReduceOpSpec(static_cast<ReduceOp>(6));
  expectError(a, "allreduce: op: not a ReduceOp");
  a.op = ReduceOpSpec::preMulSumDevice(buf + 100);
  EXPECT_NO_THROW(validateCollective(ctx, "allreduce", a));
  int hostScalar = 0;
  a.op = ReduceOpSpec::preMulSumDevice(&hostScalar);
  expectError(a, "allreduce: op (PreMulSum device scalar): not device memory");
  a.op = ReduceOpSpec::preMulSum(0.5);
  EXPECT_NO_THROW(validateCollective(ctx, "allreduce", a));
}

TEST_F(Validation, PointerKinds) {
  CollectiveArgs a = args(Collective::AllReduce, 8);
  pointers.overrides[a.input] = {PointerInfo::Kind::Device, 2};
  expectError(a, "allreduce: send: device memory of another GPU");
  pointers.overrides[a.input] = {PointerInfo::Kind::Host, -1};
  expectError(a, "allreduce: send: pinned host memory");
  pointers.overrides[a.input] = {PointerInfo::Kind::Managed, -1};
  EXPECT_NO_THROW(validateCollective(ctx, "allreduce", a));
  EXPECT_EQ(bufferProblem({PointerInfo::Kind::Device, 0}, 0), nullptr);
  EXPECT_NE(bufferProblem({PointerInfo::Kind::Unknown, -1}, 0), nullptr);
}

TEST_F(Validation, AllToAllv) {
  const size_t zeros[4] = {0, 0, 0, 0}, ones[4] = {1, 1, 1, 1};
  CollectiveArgs a = args(Collective::AllToAllv, 0);
  a.sendCounts = a.recvCounts = a.sendDispls = a.recvDispls = zeros;
  a.input = nullptr, a.output = nullptr;
  EXPECT_NO_THROW(validateCollective(ctx, "alltoallv", a));  // nothing flows: buffers may be null
  a.sendCounts = ones;
  expectError(a, "alltoallv: send: null");
  a.recvDispls = nullptr;
  expectError(a, "alltoallv: recvDispls: null pointer");
  a.recvDispls = zeros;
  a.countsLocation = CountsLocation::Device;  // host arrays claimed to be device memory
  expectError(a, "alltoallv: sendCounts: not device memory");
}

TEST_F(Validation, PointToPoint) {
  EXPECT_NO_THROW(validateP2P(ctx, "send", buf, 4, DataType::F32, 1));  // self is allowed
  EXPECT_NO_THROW(validateP2P(ctx, "recv", nullptr, 0, DataType::F32, 3));
  EXPECT_THROW(validateP2P(ctx, "send", buf, 4, DataType::F32, 4), Error);
  try {
    validateP2P(ctx, "recv", nullptr, 4, DataType::F32, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: recv: buffer: null pointer"), std::string::npos)
        << e.what();
  }
  const P2POp ops[2] = {{P2POp::Send, 0, buf, 4}, {P2POp::Recv, -1, buf, 4}};
  CollectiveArgs g = args(Collective::SendRecv, 0, DataType::U8);
  g.p2pOps = ops, g.numP2POps = 2;
  expectError(g, "recv: peer: -1 out of range");
}

}  // namespace
}  // namespace meshcomm
