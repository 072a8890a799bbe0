// Selector: JSON tables, rule matching, fallback, MESHCOMM_ALGO forcing (CPU only, fake algorithms).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "collectives/default_table.hpp"
#include "collectives/selection_plan.hpp"
#include "meshcomm/builtin_algorithms.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/selector.hpp"
#include "scoped_env.hpp"

namespace meshcomm {
namespace {

// An algorithm that supports calls up to `maxBytes` (and refuses everything when `refuse` is set).
class FakeAlgorithm : public Algorithm {
 public:
  FakeAlgorithm(std::string name, Collective c, size_t maxBytes = SIZE_MAX)
      : name_(std::move(name)), collective_(c), maxBytes_(maxBytes) {}
  std::string name() const override { return name_; }
  Collective collective() const override { return collective_; }
  std::string unsupportedReason(const CollectiveArgs& a, const CommTopology& t) const override {
    if (a.messageBytes(t.nRanks) > maxBytes_) return "too large for " + name_;
    return {};
  }
  LaunchConfig defaultConfig(const CollectiveArgs&, const CommTopology&) const override { return {}; }
  void launch(CommResources&, const CollectiveArgs&, const LaunchConfig&, void*) override {}

 private:
  std::string name_;
  Collective collective_;
  size_t maxBytes_;
};

using test::ScopedEnv;

CollectiveArgs allReduceArgs(size_t count, DataType dtype = DataType::F32) {
  CollectiveArgs a;
  a.collective = Collective::AllReduce;
  a.count = count;
  a.dtype = dtype;
  a.input = reinterpret_cast<const void*>(0x1000);
  a.output = reinterpret_cast<void*>(0x100000);
  return a;
}

CommTopology topo(int nRanks, int rank = 0) {
  CommTopology t;
  t.rank = rank;
  t.nRanks = nRanks;
  return t;
}

AlgorithmCollection threeAllReduces() {
  AlgorithmCollection c;
  c.add(std::make_shared<FakeAlgorithm>("small", Collective::AllReduce, 1024));
  c.add(std::make_shared<FakeAlgorithm>("mid", Collective::AllReduce, 1 << 20));
  c.add(std::make_shared<FakeAlgorithm>("large", Collective::AllReduce));
  c.add(std::make_shared<FakeAlgorithm>("ag", Collective::AllGather));
  return c;
}

void expectErrorContains(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL() << "expected an error containing " << parts[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(SelectorJson, ParsesEveryField) {
  Selector s = Selector::fromJson(R"({"rules": [
    {"collective": "allreduce", "algorithm": "x", "min_bytes": 10, "max_bytes": 20, "world_size": 4,
     "dtype": "bfloat16", "in_place": true, "capturing": false, "blocks": 32, "threads": 512},
    {"collective": "alltoall", "algorithm": "y"}]})");
  ASSERT_EQ(s.rules().size(), 2u);
  const SelectorRule& r = s.rules()[0];
  EXPECT_EQ(r.collective, Collective::AllReduce);
  EXPECT_EQ(r.algorithm, "x");
  EXPECT_EQ(r.minBytes, 10u);
  EXPECT_EQ(r.maxBytes, 20u);
  EXPECT_EQ(r.worldSize, 4);
  EXPECT_EQ(r.dtype, DataType::BF16);
  EXPECT_EQ(r.inPlace, true);
  EXPECT_EQ(r.capturing, false);
  EXPECT_EQ(r.config.nBlocks, 32);
  EXPECT_EQ(r.config.nThreadsPerBlock, 512);
  const SelectorRule& d = s.rules()[1];
  EXPECT_EQ(d.collective, Collective::AllToAll);
  EXPECT_EQ(d.minBytes, 0u);
  EXPECT_EQ(d.maxBytes, SIZE_MAX);
  EXPECT_EQ(d.worldSize, 0);
  EXPECT_FALSE(d.dtype.has_value());
  EXPECT_FALSE(d.inPlace.has_value());
  EXPECT_FALSE(d.capturing.has_value());
}

TEST(SelectorJson, RejectsMalformedTables) {
  auto bad = [](const std::string& text, std::vector<std::string> parts) {
    expectErrorContains([&] { Selector::fromJson(text); }, parts);
  };
  bad("not json", {"not valid JSON"});
  bad("[]", {"expected an object"});
  bad(R"({"rules": [], "extra": 1})", {"unknown top-level field 'extra'"});
  bad(R"({"rules": {}})", {"'rules' must be present and an array"});
  bad(R"({"rules": [1]})", {"rule 0", "expected an object"});
  bad(R"({"rules": [{"algorithm": "x"}]})", {"rule 0", "'collective'", "missing"});
  bad(R"({"rules": [{"collective": "allreduce"}]})", {"rule 0", "'algorithm'", "missing"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": ""}]})", {"'algorithm'", "empty"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x"}, {"collective": "allreduce", "algorithm": "x",
       "colour": 1}]})",
      {"rule 1", "field 'colour'", "unknown field"});
  bad(R"({"rules": [{"collective": "allsum", "algorithm": "x"}]})", {"rule 0", "'collective'", "allsum"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "dtype": "fp32"}]})",
      {"rule 0", "'dtype'", "unknown dtype 'fp32'", "bfloat16"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "min_bytes": -1}]})",
      {"'min_bytes'", "negative"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "max_bytes": 1.5}]})",
      {"'max_bytes'", "integer"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "min_bytes": 9, "max_bytes": 3}]})",
      {"'min_bytes'", "larger than max_bytes"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "world_size": 0}]})",
      {"'world_size'", "positive"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "threads": 2048}]})",
      {"'threads'", "exceeds 1024"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": "x", "in_place": 1}]})",
      {"'in_place'", "true or false"});
  bad(R"({"rules": [{"collective": "allreduce", "algorithm": 3}]})", {"'algorithm'", "string"});
}

TEST(SelectorJson, RankLocalSizesCannotBeBounded) {
  // alltoallv and sendrecv sizes differ between ranks: a size-bounded rule could split the ranks.
  for (const char* coll : {"alltoallv", "sendrecv"}) {
    for (const char* bound : {"\"min_bytes\": 1", "\"max_bytes\": 4096"}) {
      const std::string text =
          std::string(R"({"rules": [{"collective": ")") + coll + R"(", "algorithm": "x", )" + bound + "}]}";
      expectErrorContains([&] { Selector::fromJson(text); }, {"rule 0", coll, "each rank sees its own size"});
    }
  }
  SelectorRule bounded;
  bounded.collective = Collective::AllToAllv;
  bounded.algorithm = "x";
  bounded.maxBytes = 1 << 20;
  expectErrorContains([&] { Selector{{bounded}}; }, {"rule 0", "alltoallv"});
  // Unbounded rules (and bounded rules of other collectives) stay accepted.
  EXPECT_EQ(Selector::fromJson(R"({"rules": [{"collective": "alltoallv", "algorithm": "x", "blocks": 8}]})")
                .rules()
                .size(),
            1u);
  bounded.collective = Collective::AllToAll;
  EXPECT_NO_THROW(Selector{{bounded}});
  EXPECT_TRUE(sizeIsRankLocal(Collective::AllToAllv));
  EXPECT_TRUE(sizeIsRankLocal(Collective::SendRecv));
  EXPECT_FALSE(sizeIsRankLocal(Collective::AllToAll));
}

TEST(SelectorJson, RoundTrips) {
  const std::string text = R"({"rules": [
    {"collective": "allreduce", "algorithm": "x", "min_bytes": 10, "max_bytes": 20, "world_size": 4,
     "dtype": "f8e5m2", "in_place": false, "capturing": true, "blocks": 3, "threads": 64},
    {"collective": "barrier", "algorithm": "y"}]})";
  const Selector a = Selector::fromJson(text);
  const Selector b = Selector::fromJson(a.toJson());
  EXPECT_EQ(a.toJson(), b.toJson());
  ASSERT_EQ(b.rules().size(), 2u);
  EXPECT_EQ(b.rules()[0].dtype, DataType::F8E5M2);
  EXPECT_EQ(b.rules()[0].capturing, true);
  EXPECT_EQ(b.rules()[0].config.nThreadsPerBlock, 64);
  EXPECT_EQ(b.rules()[1].collective, Collective::Barrier);
  EXPECT_EQ(b.rules()[1].maxBytes, SIZE_MAX);
}

TEST(SelectorJson, FromFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "meshcomm_selector_table.json";
  { std::ofstream(path) << R"({"rules": [{"collective": "allreduce", "algorithm": "x", "blocks": -2}]})"; }
  expectErrorContains([&] { Selector::fromFile(path); }, {path, "rule 0", "'blocks'"});
  expectErrorContains([&] { Selector::fromFile(path + ".missing"); }, {"cannot open"});
  { std::ofstream(path) << R"({"rules": [{"collective": "allreduce", "algorithm": "x"}]})"; }
  EXPECT_EQ(Selector::fromFile(path).rules().size(), 1u);
}

TEST(SelectorJson, DefaultTableParses) {
  const Selector s = Selector::fromJson(defaultSelectionTable());
  EXPECT_FALSE(s.rules().empty());
  for (const auto& r : s.rules()) EXPECT_FALSE(r.algorithm.empty());
}

// A fake algorithm for every name the built-in table uses, accepting every size except those in `refused`.
AlgorithmCollection defaultTableAlgorithms(const std::vector<std::string>& refused) {
  AlgorithmCollection algs;
  const Selector table = Selector::fromJson(defaultSelectionTable());
  for (const auto& r : table.rules()) {
    if (algs.find(r.algorithm) != nullptr) continue;
    const bool refuse = std::find(refused.begin(), refused.end(), r.algorithm) != refused.end();
    algs.add(std::make_shared<FakeAlgorithm>(r.algorithm, r.collective, refuse ? 0 : SIZE_MAX));
  }
  return algs;
}

// The built-in allreduce crossovers (names only: fake algorithms that accept every size): one-shot LL up to
// 128 KiB, up to 256 KiB on 2 and 4 ranks, two-shot LL up to 1 MiB, then rsag (zero-copy, listed before it,
// declines every call here).
TEST(SelectorSelect, DefaultTableAllReduceCrossovers) {
  const AlgorithmCollection algs = defaultTableAlgorithms({"allreduce_zerocopy"});
  const Selector s = Selector::fromJson(defaultSelectionTable());
  auto pick = [&](size_t bytes, int n) {
    return s.select(allReduceArgs(bytes / 4), topo(n), algs).algorithm->name();
  };
  for (int n : {2, 4, 8}) {
    EXPECT_EQ(pick(128 << 10, n), "allreduce_oneshot_ll") << n;
    EXPECT_EQ(pick(256 << 10, n), n == 8 ? "allreduce_twoshot_ll" : "allreduce_oneshot_ll") << n;
    EXPECT_EQ(pick(512 << 10, n), "allreduce_twoshot_ll") << n;
    EXPECT_EQ(pick(1 << 20, n), "allreduce_twoshot_ll") << n;
    EXPECT_EQ(pick(2 << 20, n), "allreduce_rsag") << n;  // unregistered: allreduce_zerocopy declines
  }
}

// reduce_scatter LL up to a 1 MiB input (nccl-tests size), the scratch engine above.
TEST(SelectorSelect, DefaultTableReduceScatterCrossover) {
  const AlgorithmCollection algs = defaultTableAlgorithms({});
  const Selector s = Selector::fromJson(defaultSelectionTable());
  auto pick = [&](size_t bytes, int n) {
    CollectiveArgs a = allReduceArgs(bytes / 4);
    a.collective = Collective::ReduceScatter;
    a.count = bytes / 4 / n;  // reduce_scatter counts the output of one rank
    return s.select(a, topo(n), algs).algorithm->name();
  };
  for (int n : {2, 4, 8}) {
    EXPECT_EQ(pick(1 << 20, n), "reduce_scatter_ll") << n;
    EXPECT_EQ(pick(2 << 20, n), "reduce_scatter_scratch") << n;
  }
}

// Every rule of the built-in table names a built-in algorithm of its collective, so a Comm always resolves
// it.
TEST(SelectorSelect, DefaultTableResolvesAgainstTheBuiltinAlgorithms) {
  EXPECT_NO_THROW(SelectionPlan(Selector::fromJson(defaultSelectionTable()), builtinAlgorithms(), {}));
}

TEST(SelectorSelect, FirstMatchingRuleBySize) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector s = Selector::fromJson(R"({"rules": [
    {"collective": "allreduce", "max_bytes": 1024, "algorithm": "small", "blocks": 7},
    {"collective": "allreduce", "min_bytes": 1025, "max_bytes": 1048576, "algorithm": "mid"},
    {"collective": "allreduce", "algorithm": "large"}]})");
  EXPECT_EQ(s.select(allReduceArgs(256), topo(8), algs).algorithm->name(), "small");  // 1024 bytes
  EXPECT_EQ(s.select(allReduceArgs(256), topo(8), algs).config.nBlocks, 7);
  EXPECT_EQ(s.select(allReduceArgs(257), topo(8), algs).algorithm->name(), "mid");
  EXPECT_EQ(s.select(allReduceArgs(1 << 18), topo(8), algs).algorithm->name(), "mid");
  EXPECT_EQ(s.select(allReduceArgs((1 << 18) + 1), topo(8), algs).algorithm->name(), "large");
}

TEST(SelectorSelect, MatchesWorldDtypeInPlaceCapturing) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector s = Selector::fromJson(R"({"rules": [
    {"collective": "allreduce", "world_size": 4, "algorithm": "small"},
    {"collective": "allreduce", "dtype": "half", "algorithm": "mid"},
    {"collective": "allreduce", "in_place": true, "capturing": true, "algorithm": "mid"},
    {"collective": "allreduce", "algorithm": "large"}]})");
  EXPECT_EQ(s.select(allReduceArgs(4), topo(4), algs).algorithm->name(), "small");
  EXPECT_EQ(s.select(allReduceArgs(4), topo(8), algs).algorithm->name(), "large");
  EXPECT_EQ(s.select(allReduceArgs(4, DataType::F16), topo(8), algs).algorithm->name(), "mid");
  CollectiveArgs inPlace = allReduceArgs(4);
  inPlace.output = const_cast<void*>(inPlace.input);
  EXPECT_EQ(s.select(inPlace, topo(8), algs).algorithm->name(), "large");
  inPlace.capturing = true;
  EXPECT_EQ(s.select(inPlace, topo(8), algs).algorithm->name(), "mid");
}

TEST(SelectorSelect, SkipsRulesWhoseAlgorithmDeclines) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector s = Selector::fromJson(R"({"rules": [
    {"collective": "allreduce", "algorithm": "small"},
    {"collective": "allreduce", "algorithm": "large"}]})");
  EXPECT_EQ(s.select(allReduceArgs(16), topo(2), algs).algorithm->name(), "small");
  EXPECT_EQ(s.select(allReduceArgs(1 << 20), topo(2), algs).algorithm->name(), "large");
}

// A typo'd name, or the name of another collective's algorithm, fails when the table meets the collection,
// naming the rule, the name and the collection's algorithms of the rule's collective.
TEST(SelectorSelect, RejectsUnknownAndForeignAlgorithms) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector typo = Selector::fromJson(R"({"rules": [
    {"collective": "allreduce", "algorithm": "small"},
    {"collective": "allreduce", "algorithm": "lrage"}]})");
  expectErrorContains([&] { SelectionPlan(typo, algs, {}); },
                      {"selection table: rule 1", "field 'algorithm'", "unknown allreduce algorithm 'lrage'",
                       "known allreduce algorithms: small, mid, large"});
  expectErrorContains([&] { typo.select(allReduceArgs(4), topo(2), algs); }, {"rule 1", "'lrage'"});
  const Selector foreign =
      Selector::fromJson(R"({"rules": [{"collective": "allreduce", "algorithm": "ag"}]})");
  expectErrorContains([&] { SelectionPlan(foreign, algs, {}); },
                      {"rule 0", "'ag' is an algorithm of allgather, not of allreduce", "small, mid, large"});
  const Selector none = Selector::fromJson(R"({"rules": [{"collective": "broadcast", "algorithm": "b"}]})");
  expectErrorContains([&] { SelectionPlan(none, algs, {}); },
                      {"rule 0", "'b'", "no broadcast algorithm is registered"});
}

TEST(SelectorSelect, FallsBackInRegistrationOrder) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector empty;
  EXPECT_EQ(empty.select(allReduceArgs(16), topo(2), algs).algorithm->name(), "small");
  EXPECT_EQ(empty.select(allReduceArgs(4096), topo(2), algs).algorithm->name(), "mid");
  EXPECT_EQ(empty.select(allReduceArgs(1 << 20), topo(2), algs).algorithm->name(), "large");
  EXPECT_EQ(empty.select(allReduceArgs(1 << 20), topo(2), algs).config.nBlocks, 0);
}

TEST(SelectorSelect, NoSupportingAlgorithmListsReasons) {
  AlgorithmCollection algs;
  algs.add(std::make_shared<FakeAlgorithm>("a1", Collective::AllReduce, 8));
  algs.add(std::make_shared<FakeAlgorithm>("a2", Collective::AllReduce, 16));
  expectErrorContains([&] { Selector().select(allReduceArgs(1024), topo(2, 1), algs); },
                      {"rank 1", "allreduce", "a1: too large for a1", "a2: too large for a2"});
  CollectiveArgs bcast;
  bcast.collective = Collective::Broadcast;
  bcast.count = 1;
  expectErrorContains([&] { Selector().select(bcast, topo(2), algs); },
                      {"broadcast", "no broadcast algorithm is registered"});
}

TEST(SelectorSelect, ForcedByEnvironment) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector s = Selector::fromJson(R"({"rules": [{"collective": "allreduce", "algorithm": "small"},
    {"collective": "allreduce", "algorithm": "large", "threads": 128}]})");
  {
    ScopedEnv env("MESHCOMM_ALGO", "allgather=ag, allreduce=large");
    const Selection sel = s.select(allReduceArgs(4), topo(2), algs);
    EXPECT_EQ(sel.algorithm->name(), "large");
    EXPECT_EQ(sel.config.nThreadsPerBlock, 128);  // a matching rule naming it supplies its config
  }
  {
    ScopedEnv env("MESHCOMM_ALGO", "allreduce=small");
    expectErrorContains([&] { s.select(allReduceArgs(1 << 20), topo(2, 1), algs); },
                        {"rank 1", "allreduce", "MESHCOMM_ALGO", "'small'", "too large for small"});
  }
  {
    ScopedEnv env("MESHCOMM_ALGO", "allreduce=ag");
    expectErrorContains([&] { s.select(allReduceArgs(4), topo(2), algs); }, {"'ag'", "not a registered"});
  }
  {
    ScopedEnv env("MESHCOMM_ALGO", "allsum=x");
    expectErrorContains([&] { s.select(allReduceArgs(4), topo(2), algs); }, {"MESHCOMM_ALGO", "allsum"});
  }
}

TEST(SelectorSelect, ForcedNamesAreCheckedWhenThePlanIsBuilt) {
  const AlgorithmCollection algs = threeAllReduces();
  const Selector none = Selector::fromJson(R"({"rules": []})");
  expectErrorContains([&] { SelectionPlan(none, algs, parseForcedAlgorithms("allreduce=smal")); },
                      {"MESHCOMM_ALGO", "'smal'", "not a registered allreduce algorithm",
                       "known allreduce algorithms: small, mid, large"});
  expectErrorContains(
      [&] { SelectionPlan(none, algs, parseForcedAlgorithms("allgather=large")); },
      {"MESHCOMM_ALGO", "'large'", "it is an algorithm of allreduce", "known allgather algorithms: ag"});
  expectErrorContains([&] { SelectionPlan(none, algs, parseForcedAlgorithms("alltoall=x")); },
                      {"'x'", "no alltoall algorithm is registered"});
  SelectionPlan ok(none, algs, parseForcedAlgorithms("allreduce=mid,allgather=ag"));
  EXPECT_EQ(ok.select(allReduceArgs(4), topo(2)).algorithm->name(), "mid");
}

TEST(SelectorSelect, ParseForcedAlgorithms) {
  const ForcedAlgorithms f = parseForcedAlgorithms("allreduce=a,alltoall = b,,");
  EXPECT_EQ(f[static_cast<int>(Collective::AllReduce)], "a");
  EXPECT_EQ(f[static_cast<int>(Collective::AllToAll)], "b");
  EXPECT_EQ(f[static_cast<int>(Collective::Barrier)], "");
  expectErrorContains([] { parseForcedAlgorithms("allreduce"); }, {"not collective=algorithm"});
  expectErrorContains([] { parseForcedAlgorithms("allreduce="); }, {"not collective=algorithm"});
}

TEST(AlgorithmCollectionTest, AddFindAndOrder) {
  AlgorithmCollection c = threeAllReduces();
  EXPECT_EQ(c.find("mid")->name(), "mid");
  EXPECT_EQ(c.find("nope"), nullptr);
  const auto ar = c.forCollective(Collective::AllReduce);
  ASSERT_EQ(ar.size(), 3u);
  EXPECT_EQ(ar[0]->name(), "small");
  EXPECT_EQ(ar[2]->name(), "large");
  EXPECT_EQ(c.forCollective(Collective::AllGather).size(), 1u);
  expectErrorContains([&] { c.add(std::make_shared<FakeAlgorithm>("mid", Collective::Reduce)); },
                      {"'mid'", "already registered"});
  expectErrorContains([&] { c.add(nullptr); }, {"null"});
  // checkAddable: the same verdicts, nothing added (Comm::addAlgorithm checks before it initializes).
  const FakeAlgorithm taken("mid", Collective::Reduce), fresh("fresh", Collective::Reduce);
  expectErrorContains([&] { c.checkAddable(&taken); }, {"'mid'", "already registered"});
  expectErrorContains([&] { c.checkAddable(nullptr); }, {"null"});
  c.checkAddable(&fresh);
  EXPECT_EQ(c.find("fresh"), nullptr);
  EXPECT_EQ(c.all().size(), 4u);
}

TEST(CudaErrorText, CaptureErrorsSayWhatToDo) {
  // The text of the CudaError a failed check throws.
  auto cudaErrorText = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::CudaError);
      return e.what();
    }
    ADD_FAILURE() << "no throw";
    return {};
  };
  // cudaErrorStreamCaptureUnsupported (900): what a device allocation during a graph capture returns.
  const std::string runtime = cudaErrorText([] { MESHCOMM_CUDA_CHECK(900); });
  const std::string driver = cudaErrorText([] { MESHCOMM_CU_CHECK(908); });
  const std::string other = cudaErrorText([] { MESHCOMM_CUDA_CHECK(2); });  // cudaErrorMemoryAllocation
  EXPECT_NE(runtime.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << runtime;
  EXPECT_NE(runtime.find("before capture"), std::string::npos) << runtime;
  EXPECT_NE(driver.find("CUresult 908"), std::string::npos) << driver;
  EXPECT_NE(driver.find("before capture"), std::string::npos) << driver;
  EXPECT_EQ(other.find("capture"), std::string::npos) << other;
}

}  // namespace
}  // namespace meshcomm
