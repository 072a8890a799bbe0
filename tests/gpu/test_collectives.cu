// Correctness of every Comm collective against a host reference (see collective_check.hpp for the input
// values, the reference and the tolerance rule).
//
//   meshcomm-run -n 4 -- build/tests/meshcomm_gpu_tests --gtest_filter='Collectives.*'
//
// Every case: fresh random inputs per rank (regenerated on the host for the reference), outputs poisoned
// with a random byte, inputs' allocations poisoned with its complement; after the call the whole output
// allocation outside the written range must still hold the poison, out-of-place inputs must be unchanged
// (and their allocations untouched), every output element must match the reference, and allreduce /
// allgather outputs must hash identically on every rank. Each case ends with one bootstrap allGather of
// (ok, hash): the ranks stop a loop together when any rank saw an exception (a desynchronised loop would
// otherwise wait on device timeouts case after case).
//
// All tests share one Comm (built in the first test of the suite, destroyed after the last; rebuilt when a
// test left it with a device error). MESHCOMM_TEST_COLL_LONG=1 widens the sweeps (counts up to 2^18 for
// every dtype and op, 5x the soak); the default suite targets < 3 minutes on 4 GPUs.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collective_check.hpp"
#include "collectives/algorithms/ll_stream.hpp"
#include "gpu_test_env.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/comm.hpp"
#include "meshcomm/env.hpp"

namespace meshcomm::test {
namespace {

constexpr const char* kEnvLong = "MESHCOMM_TEST_COLL_LONG";

bool longRun() {
  return envFlag(kEnvLong);
}

std::unique_ptr<Comm>& commSlot() {
  static std::unique_ptr<Comm> c;
  return c;
}

// Puts a rule naming `algorithm` first in the Comm's selection table while it lives (every rank does the
// same at the same point of a test, so all ranks pick it); restores the previous table after. An algorithm
// that declines a call falls through to the next rule as usual.
class ScopedAlgorithm {
 public:
  ScopedAlgorithm(Comm& comm, Collective c, const std::string& algorithm)
      : comm_(comm), saved_(comm.selector()) {
    std::vector<SelectorRule> rules(1);
    rules[0].collective = c;
    rules[0].algorithm = algorithm;
    rules.insert(rules.end(), saved_.rules().begin(), saved_.rules().end());
    comm.setSelector(Selector(std::move(rules)));
  }
  ~ScopedAlgorithm() { comm_.setSelector(saved_); }
  ScopedAlgorithm(const ScopedAlgorithm&) = delete;
  ScopedAlgorithm& operator=(const ScopedAlgorithm&) = delete;

 private:
  Comm& comm_;
  Selector saved_;
};

// True when the environment overrides the built-in selection (then tests do not check what was picked).
bool selectionOverridden() {
  return envRaw("MESHCOMM_ALGO").has_value() || envRaw("MESHCOMM_ALGO_TABLE").has_value();
}

// The algorithm the Comm picks for one host-counts alltoallv / one send+recv pair (both only look at sizes
// and pointers), to make sure a test runs what it names.
std::string selectedAlltoallv(Comm& comm, bool deviceCounts) {
  const std::vector<size_t> ones(comm.size(), 1);
  CollectiveArgs a;
  a.collective = Collective::AllToAllv;
  a.dtype = DataType::F32;
  a.input = reinterpret_cast<const void*>(0x1000);
  a.output = reinterpret_cast<void*>(0x2000);
  a.sendCounts = a.sendDispls = a.recvCounts = a.recvDispls = ones.data();
  a.countsLocation = deviceCounts ? CountsLocation::Device : CountsLocation::Host;
  return comm.select(a).algorithm->name();
}
// ... and for one call of a non-vector collective of `count` elements (sizes and pointers only).
std::string selectedCollective(Comm& comm, Collective coll, DataType t, uint64_t count) {
  CollectiveArgs a;
  a.collective = coll;
  a.dtype = t;
  a.count = count;
  a.input = reinterpret_cast<const void*>(0x1000);
  a.output = reinterpret_cast<void*>(0x200000);
  return comm.select(a).algorithm->name();
}
std::string selectedSendRecv(Comm& comm) {
  const P2POp op{P2POp::Send, 0, reinterpret_cast<void*>(0x1000), 4};
  CollectiveArgs a;
  a.collective = Collective::SendRecv;
  a.dtype = DataType::U8;
  a.p2pOps = &op;
  a.numP2POps = 1;
  return comm.select(a).algorithm->name();
}

const RedCase kRedCases[] = {
    {ReduceOp::Sum, false}, {ReduceOp::Prod, false},      {ReduceOp::Min, false},      {ReduceOp::Max, false},
    {ReduceOp::Avg, false}, {ReduceOp::PreMulSum, false}, {ReduceOp::PreMulSum, true},
};

// Counts of the dtype x op matrices: 1, 3, 1023 and powers of two.
std::vector<uint64_t> matrixCounts() {
  std::vector<uint64_t> c = {1, 3, 1023};
  const int maxLog = longRun() ? 18 : 14;
  for (int k = 1; k <= maxLog; k += (k < 6 ? 1 : 2)) c.push_back(1ull << k);
  return c;
}

// One call of a non-vector collective.
struct Case {
  Collective coll = Collective::AllReduce;
  DataType dtype = DataType::F32;
  RedCase red;
  uint64_t count = 1;  // the Comm call's count argument
  bool inPlace = false;
  uint32_t sendOff = 0, recvOff = 0;  // elements
  int root = 0;
  bool nullOnNonRoot = false;  // reduce/gather recv, scatter send: null where the API allows it
  uint64_t seed = 1;
  std::string describe() const {
    return detail::concat(collectiveName(coll), " ", dataTypeName(dtype), " ", red.name(), " count ", count,
                          inPlace ? " in-place" : " out-of-place", " sendOff ", sendOff, " recvOff ", recvOff,
                          " root ", root, nullOnNonRoot ? " (null on non-roots)" : "");
  }
};

bool isReduction(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

// Bytes a case needs in each guarded buffer (payload only).
uint64_t caseCapacity(Collective coll, uint64_t count, DataType t, int n) {
  return static_cast<uint64_t>(n) * count * dtypeInfo(t).size;
}

struct Agreement {
  bool allOk = true;
  bool sameHash = true;
};

class Collectives : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    auto& slot = commSlot();
    if (!slot) {
      CommConfig cfg;
      cfg.cudaDevice = comm().cudaDevice();
      slot = std::make_unique<Comm>(process().bootstrap, cfg);
    }
    ASSERT_EQ(cc().rank(), rank());
    ASSERT_EQ(cc().size(), worldSize());
  }

  void TearDown() override {
    if (!process().expectKill && commSlot()) {
      bool broken = false;
      if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
        ADD_FAILURE() << "cudaDeviceSynchronize: " << cudaGetErrorString(err);
        broken = true;
      }
      try {
        commSlot()->checkError();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "[rank " << rank() << "] Comm device error after the test: " << e.what();
        broken = true;
      }
      std::vector<int32_t> flags(worldSize(), 0);
      flags[rank()] = broken ? 1 : 0;
      try {
        bootstrap().allGather(flags.data(), sizeof(int32_t));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] collective tests: cannot agree with the other ranks (%s); exiting\n",
                     rank(), e.what());
        std::fflush(nullptr);
        std::_Exit(1);
      }
      if (std::any_of(flags.begin(), flags.end(), [](int32_t f) { return f != 0; })) {
        // Every rank rebuilds the Comm before the next test (a device error sticks to a Comm).
        try {
          commSlot().reset();
        } catch (const std::exception& e) {
          ADD_FAILURE() << "destroying the broken Comm: " << e.what();
        }
      }
    }
    GpuTest::TearDown();
  }

  static void TearDownTestSuite() { commSlot().reset(); }

  Comm& cc() const { return *commSlot(); }

  // Destroys and rebuilds the shared Comm (collective: every rank at the same point).
  void rebuildComm() {
    commSlot().reset();
    CommConfig cfg;
    cfg.cudaDevice = comm().cudaDevice();
    commSlot() = std::make_unique<Comm>(process().bootstrap, cfg);
  }

  // Ends one case on every rank: shares (ok, hash); returns whether every rank was ok and all hashes agree.
  Agreement agree(bool ok, uint64_t hash) {
    struct Msg {
      int32_t ok;
      int32_t pad;
      uint64_t hash;
    };
    std::vector<Msg> all(worldSize());
    all[rank()] = Msg{ok ? 1 : 0, 0, hash};
    bootstrap().allGather(all.data(), sizeof(Msg));
    Agreement a;
    for (const Msg& m : all) {
      a.allOk = a.allOk && m.ok != 0;
      a.sameHash = a.sameHash && m.hash == all[0].hash;
    }
    return a;
  }

  // The error the Comm recorded (Comm::checkError's message), or none.
  std::optional<std::string> recordedError() {
    try {
      cc().checkError();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::nullopt;
  }
  // One case that ends the Comm (an error that is fatal for it, expected on some ranks): an exception of
  // `body` is a failure under `ctx`; every rank agrees, then a fresh Comm for the next case (and test).
  template <class Body>
  void runFatalCase(const std::string& ctx, Body&& body) {
    agree(tryCase(ctx, body), 0);
    rebuildComm();
  }
  // Runs one case on this rank: an exception of `body` is a failure under `ctx`. Returns whether it ran
  // through (a loop passes that to everyRankOk).
  template <class Body>
  bool tryCase(const std::string& ctx, Body&& body) {
    try {
      body();
      return true;
    } catch (const std::exception& e) {
      fail(ctx, e.what());
      return false;
    }
  }

  // Reports the first few failures of a loop as gtest failures; counts the rest.
  void fail(const std::string& context, const std::string& what) {
    if (++failures_ <= 8) ADD_FAILURE() << "[rank " << rank() << "] " << context << ": " << what;
  }
  uint64_t failures_ = 0;

  // Adds the bytes of `buf` written outside its first `payload` bytes (still `poison`) to `bad` and fails the
  // case if anything is wrong (`first` describes the first wrong element).
  void failIfWrong(const std::string& ctx, GuardedBuffer& buf, uint64_t payload, uint8_t poison, uint64_t bad,
                   const std::string& first, const char* unit) {
    buf.countOutside(stream(), buf.at(0), payload, poison, counters_.at(0));
    bad += counters_.collect(stream())[0];
    if (bad != 0) fail(ctx, detail::concat(bad, " wrong ", unit, "; ", first));
  }
  // A group in which sends read what earlier receives of it write (send/recv section below).
  void dependentStepsInOneGroup(bool hypercube);
  // After a case of a loop: false (and a failure naming `ctx`) when any rank saw an exception.
  bool everyRankOk(bool ok, const std::string& ctx) {
    if (agree(ok, 0).allOk) return true;
    ADD_FAILURE() << "stopping at " << ctx << ": a rank saw an exception";
    return false;
  }

  // The device copy of this rank's PreMulSum scalar for `t` (one element).
  const void* deviceScalar(DataType t) {
    if (!scalar_) scalar_ = std::make_unique<GpuBuffer>(8);
    const double s = preMulScalar(t, true, rank());
    const uint64_t bits =
        dtypeInfo(t).isFloat ? encodeExactFloat(s, t) : static_cast<uint64_t>(static_cast<int64_t>(s));
    MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(scalar_->data(), &bits, 8, cudaMemcpyHostToDevice, stream()));
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));  // `bits` is a local
    return scalar_->data();
  }
  ReduceOpSpec spec(const RedCase& rc, DataType t) {
    if (rc.op != ReduceOp::PreMulSum) return ReduceOpSpec(rc.op);
    if (rc.deviceScalar) return ReduceOpSpec::preMulSumDevice(deviceScalar(t));
    return ReduceOpSpec::preMulSum(preMulScalar(t, false, rank()));
  }

  // Runs one case with `send`/`recv` (capacity >= caseCapacity) and checks it. Returns false when the case
  // threw on this rank (after reporting it); sets *hash for the bit-identity check.
  bool runCase(const Case& c, GuardedBuffer& send, GuardedBuffer& recv, uint64_t* hash);

  // Runs a list of cases with agreement after each one; stops every rank at the first exception anywhere.
  void runCases(const std::vector<Case>& cases, GuardedBuffer& send, GuardedBuffer& recv) {
    for (size_t k = 0; k < cases.size(); ++k) {
      uint64_t hash = 0;
      const bool ok = runCase(cases[k], send, recv, &hash);
      const Agreement a = agree(ok, hash);
      const bool hashed = cases[k].coll == Collective::AllReduce || cases[k].coll == Collective::AllGather ||
                          cases[k].coll == Collective::Broadcast;
      if (hashed && !a.sameHash) fail(cases[k].describe(), "outputs differ between ranks (hash)");
      if (!a.allOk) {
        ADD_FAILURE() << "stopping after case " << k << " of " << cases.size()
                      << ": a rank saw an exception (" << cases[k].describe() << ")";
        break;
      }
    }
    EXPECT_EQ(failures_, 0u) << failures_ << " failed checks on rank " << rank() << " in " << cases.size()
                             << " cases";
  }

  std::unique_ptr<GpuBuffer> scratch_;
  std::unique_ptr<GpuBuffer> scalar_;
  DeviceCounters counters_{4};
};

bool Collectives::runCase(const Case& c, GuardedBuffer& send, GuardedBuffer& recv, uint64_t* hash) {
  const int n = worldSize(), me = rank();
  const DataType t = c.dtype;
  const uint64_t es = dtypeInfo(t).size;
  const uint64_t cnt = c.count;
  const bool isRoot = me == c.root;
  Rng rng(c.seed);
  const uint8_t P = static_cast<uint8_t>(rng.next());
  const uint8_t Q = static_cast<uint8_t>(~P);
  GenSpec g;
  g.dtype = t;
  g.kind = isReduction(c.coll) ? valueKindFor(t, c.red.op) : ValueKind::General;
  g.nRanks = n;
  g.seed = c.seed | 1;
  const std::string ctx = c.describe();
  cudaStream_t s = stream();
  try {
    // Elements of the input each rank provides and of the output.
    uint64_t inElems = cnt, outElems = cnt;
    switch (c.coll) {
      case Collective::ReduceScatter:
      case Collective::AllToAll:
        inElems = n * cnt;
        outElems = c.coll == Collective::AllToAll ? n * cnt : cnt;
        break;
      case Collective::AllGather:
      case Collective::Gather:
        outElems = n * cnt;
        break;
      case Collective::Scatter:
        inElems = n * cnt;
        break;
      default:
        break;
    }
    if (c.sendOff * es + inElems * es > send.capacity() + GuardedBuffer::kMaxOffsetBytes ||
        c.recvOff * es + std::max(inElems, outElems) * es > recv.capacity() + GuardedBuffer::kMaxOffsetBytes)
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "test buffers too small for ", ctx);
    send.poison(s, Q);
    recv.poison(s, P);
    char* sendPtr = send.at(c.sendOff * es);
    char* recvPtr = recv.at(c.recvOff * es);
    // Ranges of the recv allocation that may change, the compared output, the parts that must keep the
    // rank's own input.
    char* regionPtr = recvPtr;
    uint64_t regionElems = outElems;
    char* cmpPtr = recvPtr;
    uint64_t cmpElems = outElems;
    std::function<Expected(uint64_t)> expect;
    struct GenRange {
      const char* p;
      uint64_t elems, first;
    };
    std::vector<GenRange> keepsInput;
    bool sendUsed = true;  // out-of-place: check the input is unchanged
    const char* sendArg = sendPtr;
    char* recvArg = recvPtr;

    auto reduceAt = [g, rc = c.red](uint64_t base) {
      return [g, rc, base](uint64_t i) { return reduceExpected(g, rc, base + i); };
    };

    // In place where the input is the whole n*cnt buffer and this rank's output is its own chunk of it
    // (reduce_scatter; scatter on the root): the other chunks must keep the input.
    auto ownChunkOfWholeInPlace = [&] {
      sendArg = recvPtr;
      recvArg = recvPtr + me * cnt * es;
      fillGenerated(s, recvPtr, n * cnt, g, me);
      regionElems = n * cnt;
      cmpPtr = recvArg;
      keepsInput.push_back({recvPtr, me * cnt, 0});
      keepsInput.push_back({recvArg + cnt * es, (n - me - 1) * cnt, (me + 1) * cnt});
    };

    if (c.inPlace) {
      sendUsed = false;
      switch (c.coll) {
        case Collective::AllReduce:
        case Collective::Broadcast:
          sendArg = recvPtr;
          fillGenerated(s, recvPtr, cnt, g, me);
          break;
        case Collective::Reduce:
          sendArg = recvPtr;
          fillGenerated(s, recvPtr, cnt, g, me);
          if (!isRoot) {
            regionElems = cnt;
            cmpElems = 0;
            keepsInput.push_back({recvPtr, cnt, 0});
          }
          break;
        case Collective::ReduceScatter:
          ownChunkOfWholeInPlace();
          break;
        case Collective::AllGather:
          sendArg = recvPtr + me * cnt * es;
          fillGenerated(s, const_cast<char*>(sendArg), cnt, g, me);
          break;
        case Collective::Gather:
          if (isRoot) {
            sendArg = recvPtr + me * cnt * es;
            fillGenerated(s, const_cast<char*>(sendArg), cnt, g, me);
          } else {
            sendUsed = true;
            fillGenerated(s, sendPtr, cnt, g, me);
            recvArg = nullptr;
            regionElems = cmpElems = 0;
          }
          break;
        case Collective::Scatter:
          if (isRoot) {
            ownChunkOfWholeInPlace();
          } else {
            sendArg = nullptr;
            sendUsed = false;
          }
          break;
        default:
          MESHCOMM_THROW(ErrorCode::InvalidUsage, "no in-place variant of ", ctx);
      }
    } else {
      fillGenerated(s, sendPtr, inElems, g, me);
      if (!isRoot && c.nullOnNonRoot) {
        if (c.coll == Collective::Reduce || c.coll == Collective::Gather) recvArg = nullptr;
        if (c.coll == Collective::Scatter) {
          sendArg = nullptr;
          sendUsed = false;
          send.poison(s, Q);
        }
      }
      if (!isRoot && (c.coll == Collective::Reduce || c.coll == Collective::Gather))
        regionElems = cmpElems = 0;
    }

    switch (c.coll) {
      case Collective::AllReduce:
      case Collective::Reduce:
        expect = reduceAt(0);
        break;
      case Collective::ReduceScatter:
        expect = reduceAt(me * cnt);
        break;
      case Collective::AllGather:
      case Collective::Gather:
        expect = [g, cnt](uint64_t j) { return copyExpected(g, static_cast<int>(j / cnt), j % cnt); };
        break;
      case Collective::Broadcast:
        expect = [g, root = c.root](uint64_t i) { return copyExpected(g, root, i); };
        break;
      case Collective::Scatter:
        expect = [g, root = c.root, base = me * cnt](uint64_t i) { return copyExpected(g, root, base + i); };
        break;
      case Collective::AllToAll:
        expect = [g, cnt, me](uint64_t j) {
          return copyExpected(g, static_cast<int>(j / cnt), me * cnt + j % cnt);
        };
        break;
      default:
        MESHCOMM_THROW(ErrorCode::InvalidUsage, "runCase: unsupported ", ctx);
    }

    switch (c.coll) {
      case Collective::AllReduce:
        cc().allReduce(sendArg, recvArg, cnt, t, spec(c.red, t), s);
        break;
      case Collective::ReduceScatter:
        cc().reduceScatter(sendArg, recvArg, cnt, t, spec(c.red, t), s);
        break;
      case Collective::Reduce:
        cc().reduce(sendArg, recvArg, cnt, t, spec(c.red, t), c.root, s);
        break;
      case Collective::AllGather:
        cc().allGather(sendArg, recvArg, cnt, t, s);
        break;
      case Collective::Broadcast:
        cc().broadcast(sendArg, recvArg, cnt, t, c.root, s);
        break;
      case Collective::Gather:
        cc().gather(sendArg, recvArg, cnt, t, c.root, s);
        break;
      case Collective::Scatter:
        cc().scatter(sendArg, recvArg, cnt, t, c.root, s);
        break;
      case Collective::AllToAll:
        cc().allToAll(sendArg, recvArg, cnt, t, s);
        break;
      default:
        break;
    }
    MESHCOMM_TEST_CHECK_LAUNCH();

    // Device-side checks: guard zones / untouched allocations, unchanged inputs.
    recv.countOutside(s, regionPtr, regionElems * es, P, counters_.at(0));
    for (const GenRange& r : keepsInput) countGenMismatches(s, r.p, r.elems, g, me, r.first, counters_.at(1));
    if (sendUsed) {
      countGenMismatches(s, sendPtr, inElems, g, me, 0, counters_.at(2));
      send.countOutside(s, sendPtr, inElems * es, Q, counters_.at(3));
    } else {
      send.countOutside(s, sendPtr, 0, Q, counters_.at(3));  // the unused send allocation: untouched
    }
    const std::vector<unsigned long long> k = counters_.collect(s);
    if (k[0] != 0)
      fail(ctx, detail::concat(k[0], " bytes of the output allocation outside the output changed"));
    if (k[1] != 0) fail(ctx, detail::concat(k[1], " elements of the in-place input that must stay changed"));
    if (k[2] != 0) fail(ctx, detail::concat(k[2], " elements of the out-of-place input changed"));
    if (k[3] != 0) fail(ctx, detail::concat(k[3], " bytes of the send allocation outside the input changed"));
    if (cmpElems != 0) {
      const Comparison cmp = compareOutput(cmpPtr, cmpElems, t, expect);
      if (cmp.mismatches != 0)
        fail(ctx, detail::concat(cmp.mismatches, " of ", cmp.checked, " elements wrong; ", cmp.first));
      *hash = cmp.hash;
    } else {
      *hash = 0;
    }
    if (c.coll == Collective::Reduce || c.coll == Collective::Gather) *hash = 0;  // root only
    return true;
  } catch (const std::exception& e) {
    fail(ctx, detail::concat("exception: ", e.what()));
    return false;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Dtype x op x count matrices
// ---------------------------------------------------------------------------------------------------------

// One case of the matrices: half of the cases at unaligned element offsets (1..15, independently for send
// and recv), the root rotating with the case index, null buffers on non-roots half the time, a fresh seed.
Case randomCase(Collective coll, DataType t, uint64_t count, bool inPlace, size_t index, int n, Rng& rng) {
  Case c;
  c.coll = coll;
  c.dtype = t;
  c.count = count;
  c.inPlace = inPlace;
  c.sendOff = rng.next() % 2 ? 0 : static_cast<uint32_t>(rng.uniform(1, 15));
  c.recvOff = rng.next() % 2 ? 0 : static_cast<uint32_t>(rng.uniform(1, 15));
  c.root = static_cast<int>(index % n);
  c.nullOnNonRoot = rng.next() % 2;
  c.seed = rng.next();
  return c;
}

std::vector<Case> reductionMatrix(Collective coll, uint64_t testSeed, int n) {
  std::vector<Case> cases;
  Rng rng(testSeed);
  for (DataType t : kAllDataTypes)
    for (const RedCase& rc : kRedCases)
      for (uint64_t count : matrixCounts())
        for (bool inPlace : {false, true}) {
          Case c = randomCase(coll, t, count, inPlace, cases.size(), n, rng);
          c.red = rc;
          cases.push_back(c);
        }
  return cases;
}

TEST_F(Collectives, AllReduceEveryDtypeOpCount) {
  auto cases = reductionMatrix(Collective::AllReduce, testSeed(), worldSize());
  auto& send =
      keep<GuardedBuffer>(caseCapacity(Collective::AllReduce, matrixCounts().back(), DataType::F64, 1));
  auto& recv = keep<GuardedBuffer>(send.capacity());
  runCases(cases, send, recv);
}

TEST_F(Collectives, ReduceScatterEveryDtypeOpCount) {
  auto cases = reductionMatrix(Collective::ReduceScatter, testSeed(), worldSize());
  const uint64_t cap =
      caseCapacity(Collective::ReduceScatter, matrixCounts().back(), DataType::F64, worldSize());
  auto& send = keep<GuardedBuffer>(cap);
  auto& recv = keep<GuardedBuffer>(cap);
  runCases(cases, send, recv);
}

TEST_F(Collectives, ReduceEveryDtypeOpCountRoot) {
  auto cases = reductionMatrix(Collective::Reduce, testSeed(), worldSize());
  auto& send = keep<GuardedBuffer>(caseCapacity(Collective::Reduce, matrixCounts().back(), DataType::F64, 1));
  auto& recv = keep<GuardedBuffer>(send.capacity());
  runCases(cases, send, recv);
}

// The matrices above run what the default table picks (at these sizes: the LL algorithms). Here every
// registered reduction algorithm is forced in turn over the same dtype x op x count matrix (each supports
// every size of it).
TEST_F(Collectives, EveryReductionAlgorithmEveryDtypeOp) {
  const uint64_t maxCount = matrixCounts().back();
  auto& send =
      keep<GuardedBuffer>(caseCapacity(Collective::ReduceScatter, maxCount, DataType::F64, worldSize()));
  auto& recv = keep<GuardedBuffer>(send.capacity());
  for (Collective coll : {Collective::AllReduce, Collective::ReduceScatter, Collective::Reduce}) {
    for (const auto& algo : cc().algorithms().forCollective(coll)) {
      SCOPED_TRACE(algo->name());
      ScopedAlgorithm forced(cc(), coll, algo->name());
      runCases(reductionMatrix(coll, testSeed() + 17, worldSize()), send, recv);
    }
  }
}

TEST_F(Collectives, DataMovementEveryDtypeCount) {
  std::vector<Case> cases;
  Rng rng(testSeed());
  const int n = worldSize();
  for (Collective coll : {Collective::AllGather, Collective::Broadcast, Collective::Gather,
                          Collective::Scatter, Collective::AllToAll})
    for (DataType t : kAllDataTypes)
      for (uint64_t count : matrixCounts())
        for (bool inPlace : {false, true}) {
          if (inPlace && coll == Collective::AllToAll) continue;  // in-place alltoall is not part of the API
          cases.push_back(randomCase(coll, t, count, inPlace, cases.size(), n, rng));
        }
  const uint64_t cap = caseCapacity(Collective::AllGather, matrixCounts().back(), DataType::F64, n);
  auto& send = keep<GuardedBuffer>(cap);
  auto& recv = keep<GuardedBuffer>(cap);
  runCases(cases, send, recv);
}

// Every registered gather and scatter algorithm forced in turn (the table picks each only in a size range):
// dtypes of each size, the matrix counts and 520 KiB + 40 bytes per rank (above the largest LL stream
// capacity, 512 KiB: gather_stream's and scatter_stream's pairs then run in the pairwise engine; the LL
// algorithms decline it and the table's choice runs), in and out of place, rotating roots, random offsets.
TEST_F(Collectives, EveryGatherAndScatterAlgorithm) {
  const int n = worldSize();
  constexpr uint64_t kBigBytes = (520u << 10) + 40;
  Rng rng(testSeed() + 31);
  auto& send = keep<GuardedBuffer>(caseCapacity(Collective::Gather, kBigBytes, DataType::U8, n));
  auto& recv = keep<GuardedBuffer>(send.capacity());
  for (Collective coll : {Collective::Gather, Collective::Scatter}) {
    for (const auto& algo : cc().algorithms().forCollective(coll)) {
      SCOPED_TRACE(algo->name());
      ScopedAlgorithm forced(cc(), coll, algo->name());
      ASSERT_EQ(selectedCollective(cc(), coll, DataType::F32, 1023), algo->name())
          << "the forced algorithm must run";
      std::vector<Case> cases;
      for (DataType t : {DataType::U8, DataType::BF16, DataType::F32, DataType::F64}) {
        std::vector<uint64_t> counts = matrixCounts();
        counts.push_back(kBigBytes / dtypeInfo(t).size);
        for (uint64_t count : counts)
          for (bool inPlace : {false, true})
            cases.push_back(randomCase(coll, t, count, inPlace, cases.size(), n, rng));
      }
      runCases(cases, send, recv);
    }
  }
}

// Every element offset 1..15 on send and on recv, every collective, a few dtypes of each size.
TEST_F(Collectives, UnalignedOffsetsEveryCollective) {
  std::vector<Case> cases;
  Rng rng(testSeed());
  const int n = worldSize();
  for (Collective coll :
       {Collective::AllReduce, Collective::ReduceScatter, Collective::Reduce, Collective::AllGather,
        Collective::Broadcast, Collective::Gather, Collective::Scatter, Collective::AllToAll})
    for (DataType t : {DataType::F32, DataType::BF16, DataType::U8, DataType::F64})
      for (uint32_t off = 1; off <= 15; ++off)
        for (bool inPlace : {false, true}) {
          if (inPlace && coll == Collective::AllToAll) continue;
          Case c;
          c.coll = coll;
          c.dtype = t;
          c.red = RedCase{ReduceOp::Sum, false};
          c.count = off % 2 ? 4097 : 1023;
          c.inPlace = inPlace;
          c.sendOff = off;
          c.recvOff = 16 - off;
          c.root = static_cast<int>(cases.size() % n);
          c.seed = rng.next();
          cases.push_back(c);
        }
  const uint64_t cap = caseCapacity(Collective::AllGather, 4097, DataType::F64, n);
  auto& send = keep<GuardedBuffer>(cap);
  auto& recv = keep<GuardedBuffer>(cap);
  runCases(cases, send, recv);
}

// Mid and large sizes, f32 and bf16 sum only: 2^16+3 .. 2^20 elements for every collective, then 64 MB and
// 256 MB (bytes of the largest buffer a rank holds) for allreduce, reduce_scatter, allgather, broadcast.
TEST_F(Collectives, LargeF32Bf16Sum) {
  const int n = worldSize();
  Rng rng(testSeed());
  std::vector<Case> cases;
  auto add = [&](Collective coll, DataType t, uint64_t count) {
    Case c;
    c.coll = coll;
    c.dtype = t;
    c.red = RedCase{ReduceOp::Sum, false};
    c.count = count;
    c.inPlace = rng.next() % 2;
    if (coll == Collective::AllToAll) c.inPlace = false;
    c.sendOff = rng.next() % 4 == 0 ? static_cast<uint32_t>(rng.uniform(1, 15)) : 0;
    c.recvOff = rng.next() % 4 == 0 ? static_cast<uint32_t>(rng.uniform(1, 15)) : 0;
    c.root = static_cast<int>(cases.size() % n);
    c.seed = rng.next();
    cases.push_back(c);
  };
  for (DataType t : {DataType::F32, DataType::BF16})
    for (uint64_t count : {(1ull << 16) + 3, 1ull << 18, 1ull << 20})
      for (Collective coll :
           {Collective::AllReduce, Collective::ReduceScatter, Collective::Reduce, Collective::AllGather,
            Collective::Broadcast, Collective::Gather, Collective::Scatter, Collective::AllToAll})
        add(coll, t, count);
  const uint64_t mb = 1ull << 20;
  for (DataType t : {DataType::F32, DataType::BF16}) {
    const uint64_t es = dtypeInfo(t).size;
    for (uint64_t bytes : {64 * mb, 256 * mb}) {
      add(Collective::AllReduce, t, bytes / es);
      add(Collective::Broadcast, t, bytes / es);
    }
    add(Collective::ReduceScatter, t, 256 * mb / es / n);
    add(Collective::AllGather, t, 256 * mb / es / n);
  }
  auto& send = keep<GuardedBuffer>(256 * mb + 64);
  auto& recv = keep<GuardedBuffer>(256 * mb + 64);
  runCases(cases, send, recv);
}

// reduce_direct over its whole range (the matrices stop at 128 KiB; it is built for up to 1 MiB): every
// dtype, sum / max / premulsum with a device scalar, odd counts, the root changing every call (its region
// halves must stay safe across root changes), unaligned offsets, in and out of place, null on non-roots.
TEST_F(Collectives, ReduceDirectUpToItsRegion) {
  ScopedAlgorithm forced(cc(), Collective::Reduce, "reduce_direct");
  ASSERT_EQ(selectedCollective(cc(), Collective::Reduce, DataType::BF16, (1u << 20) / 2), "reduce_direct")
      << "1 MiB must fit reduce_direct's region";
  Rng rng(testSeed() + 29);
  std::vector<Case> cases;
  for (DataType t : kAllDataTypes) {
    const uint64_t es = dtypeInfo(t).size;
    for (uint64_t count : {(64ull << 10) / es + 3, (256ull << 10) / es - 1, (1ull << 20) / es})
      for (const RedCase& rc : {RedCase{ReduceOp::Sum, false}, RedCase{ReduceOp::Max, false},
                                RedCase{ReduceOp::PreMulSum, true}}) {
        Case c = randomCase(Collective::Reduce, t, count, rng.next() % 2, cases.size(), worldSize(), rng);
        c.red = rc;
        cases.push_back(c);
      }
  }
  auto& send = keep<GuardedBuffer>(1ull << 20);
  auto& recv = keep<GuardedBuffer>(1ull << 20);
  runCases(cases, send, recv);
}

// ---------------------------------------------------------------------------------------------------------
// alltoallv: random splits (zeros included) that change every call, host and device counts
// ---------------------------------------------------------------------------------------------------------

// The whole n x n split of one call (every rank derives the same matrix from the shared seed) and this
// rank's counts and displacements (random gaps between chunks, chunks in a random order).
struct Splits {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  uint64_t sendExtent = 0, recvExtent = 0;  // elements spanned
  std::string describe() const {
    std::string s = "sendCounts";
    for (size_t v : sendCounts) s += " " + std::to_string(v);
    s += ", recvCounts";
    for (size_t v : recvCounts) s += " " + std::to_string(v);
    return s;
  }
};

Splits randomSplits(uint64_t seed, int n, int me, uint64_t maxCount) {
  Rng rng(seed);
  std::vector<size_t> m(n * n);
  for (auto& v : m) v = rng.next() % 4 == 0 ? 0 : rng.size(maxCount);
  Splits s;
  s.sendCounts.resize(n);
  s.recvCounts.resize(n);
  for (int p = 0; p < n; ++p) {
    s.sendCounts[p] = m[me * n + p];
    s.recvCounts[p] = m[p * n + me];
  }
  auto layout = [&](const std::vector<size_t>& counts, std::vector<size_t>& displs, uint64_t& extent) {
    std::vector<int> order(n);
    for (int p = 0; p < n; ++p) order[p] = p;
    for (int p = n - 1; p > 0; --p) std::swap(order[p], order[rng.next() % (p + 1)]);
    displs.assign(n, 0);
    uint64_t at = 0;
    for (int p : order) {
      at += rng.next() % 4;  // gap
      displs[p] = at;
      at += counts[p];
    }
    extent = at;
  };
  layout(s.sendCounts, s.sendDispls, s.sendExtent);
  layout(s.recvCounts, s.recvDispls, s.recvExtent);
  return s;
}

class AllToAllvRunner {
 public:
  // Capacity for calls with per-peer counts up to maxCount of dtype t.
  AllToAllvRunner(int n, uint64_t maxCount, DataType t)
      : n_(n),
        send_((maxCount + 4) * n * dtypeInfo(t).size),
        recv_((maxCount + 4) * n * dtypeInfo(t).size),
        devCounts_(4 * n * sizeof(size_t)) {}

  // Prepares buffers (and, for device counts, the device arrays) for a call with `splits`.
  void prepare(cudaStream_t s, const Splits& sp, const GenSpec& g, int me, uint8_t poison) {
    send_.poison(s, static_cast<uint8_t>(~poison));
    recv_.poison(s, poison);
    for (int p = 0; p < n_; ++p)
      fillGenerated(s, send_.at(0) + sp.sendDispls[p] * dtypeInfo(g.dtype).size, sp.sendCounts[p], g, me,
                    static_cast<uint64_t>(p) << 32);
    hostArrays_.clear();
    for (const auto* v : {&sp.sendCounts, &sp.sendDispls, &sp.recvCounts, &sp.recvDispls})
      hostArrays_.insert(hostArrays_.end(), v->begin(), v->end());
    MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(devCounts_.data(), hostArrays_.data(),
                                        hostArrays_.size() * sizeof(size_t), cudaMemcpyHostToDevice, s));
  }
  const size_t* counts(int which, bool device) const {
    return (device ? static_cast<const size_t*>(devCounts_.data()) : hostArrays_.data()) + which * n_;
  }
  void call(Comm& comm, cudaStream_t s, DataType t, bool device) {
    comm.allToAllv(send_.at(0), counts(0, device), counts(1, device), recv_.at(0), counts(2, device),
                   counts(3, device), t, s, device ? CountsLocation::Device : CountsLocation::Host);
  }
  // Checks the receive allocation: every chunk from its sender, poison elsewhere (gaps included). Returns
  // an empty string when correct.
  std::string check(cudaStream_t s, const Splits& sp, const GenSpec& g, int me, uint8_t poison,
                    DeviceCounters& counters) {
    const uint64_t es = dtypeInfo(g.dtype).size;
    std::string err;
    // Poison outside the chunks: everything before/after the extent on the device, the gaps on the host.
    recv_.countOutside(s, recv_.at(0), sp.recvExtent * es, poison, counters.at(0));
    send_.countOutside(s, send_.at(0), sp.sendExtent * es, static_cast<uint8_t>(~poison), counters.at(1));
    for (int p = 0; p < n_; ++p)
      countGenMismatches(s, send_.at(0) + sp.sendDispls[p] * es, sp.sendCounts[p], g, me,
                         static_cast<uint64_t>(p) << 32, counters.at(2));
    const auto k = counters.collect(s);
    if (k[0] != 0) err += detail::concat(k[0], " bytes outside the received extent changed; ");
    if (k[1] != 0) err += detail::concat(k[1], " bytes of the send allocation outside the input changed; ");
    if (k[2] != 0) err += detail::concat(k[2], " input elements changed; ");
    std::vector<uint8_t> host(sp.recvExtent * es);
    if (!host.empty())
      MESHCOMM_CUDA_CHECK(cudaMemcpy(host.data(), recv_.at(0), host.size(), cudaMemcpyDeviceToHost));
    std::vector<char> covered(sp.recvExtent, 0);
    uint64_t bad = 0;
    std::string first;
    for (int p = 0; p < n_; ++p) {
      for (uint64_t i = 0; i < sp.recvCounts[p]; ++i) {
        const uint64_t at = sp.recvDispls[p] + i;
        covered[at] = 1;
        uint64_t got = 0;
        std::memcpy(&got, host.data() + at * es, es);
        const uint64_t want = genBits(g, p, (static_cast<uint64_t>(me) << 32) + i);
        if (!matches(got, Expected{true, want, 0, 0}, g.dtype) && bad++ == 0)
          first = detail::concat("from rank ", p, " element ", i, ": got ", describeElement(got, g.dtype),
                                 ", expected ", describeElement(want, g.dtype));
      }
    }
    for (uint64_t at = 0; at < sp.recvExtent; ++at) {
      if (covered[at]) continue;
      for (uint64_t b = 0; b < es; ++b)
        if (host[at * es + b] != poison && bad++ == 0)
          first = detail::concat("gap element ", at, " was written");
    }
    if (bad != 0) err += detail::concat(bad, " wrong elements/bytes; ", first);
    return err;
  }

 private:
  int n_;
  GuardedBuffer send_, recv_;
  GpuBuffer devCounts_;
  std::vector<size_t> hostArrays_;
};

// Host counts run alltoallv_ll (per pair: LL packets up to its capacity, the scratch pipeline above; the
// wide iterations mix both in one call) and, forced, alltoallv_scratch; device counts run alltoallv_scratch.
TEST_F(Collectives, AllToAllvRandomSplitsHostAndDeviceCounts) {
  const int n = worldSize(), me = rank();
  const uint64_t maxCount = 5000, wideCount = 80000;  // wide: up to 640 KB per pair (i64)
  const int iters = longRun() ? 600 : 150;
  Rng rng(testSeed());
  const DataType types[] = {DataType::F32, DataType::BF16, DataType::U8, DataType::I64};
  const char* modes[] = {"host counts (alltoallv_ll)", "device counts (alltoallv_scratch)",
                         "host counts (alltoallv_scratch)"};
  std::vector<std::unique_ptr<AllToAllvRunner>> runners;
  for (DataType t : types) runners.push_back(std::make_unique<AllToAllvRunner>(n, wideCount, t));
  for (int it = 0; it < iters; ++it) {
    const int ti = it % 4;
    const int mode = (it / 4) % 3;
    const bool device = mode == 1;
    const DataType t = types[ti];
    const uint64_t seed = rng.next();
    const Splits sp = randomSplits(seed, n, me, it % 3 == 0 ? 7 : it % 5 == 1 ? wideCount : maxCount);
    GenSpec g{t, ValueKind::General, n, seed | 1};
    const uint8_t poison = static_cast<uint8_t>(seed >> 40);
    const std::string ctx = detail::concat("alltoallv iteration ", it, " ", dataTypeName(t), " ", modes[mode],
                                           " (", sp.describe(), ")");
    const bool ok = tryCase(ctx, [&] {
      std::unique_ptr<ScopedAlgorithm> forced;
      if (mode == 2)
        forced = std::make_unique<ScopedAlgorithm>(cc(), Collective::AllToAllv, "alltoallv_scratch");
      const std::string want = mode == 0 ? "alltoallv_ll" : "alltoallv_scratch";
      if (!selectionOverridden() && selectedAlltoallv(cc(), device) != want)
        fail(ctx, detail::concat("selected ", selectedAlltoallv(cc(), device), ", expected ", want));
      runners[ti]->prepare(stream(), sp, g, me, poison);
      runners[ti]->call(cc(), stream(), t, device);
      MESHCOMM_TEST_CHECK_LAUNCH();
      const std::string err = runners[ti]->check(stream(), sp, g, me, poison, counters_);
      if (!err.empty()) fail(ctx, err);
    });
    if (!everyRankOk(ok, ctx)) break;
  }
  EXPECT_EQ(failures_, 0u);
}

// ---------------------------------------------------------------------------------------------------------
// send/recv groups
// ---------------------------------------------------------------------------------------------------------

// Slot layout: chunk for/from peer p at p * slot elements; counts from a shared matrix. Every case runs with
// sendrecv_ll (the default: per pair LL packets up to its capacity, 128 KiB, the scratch pipeline above;
// maxCount 65536 floats mixes both in one group) and with sendrecv_scratch.
TEST_F(Collectives, SendRecvGroups) {
  const int n = worldSize(), me = rank();
  const DataType t = DataType::F32;
  const uint64_t es = 4, slot = 70000;
  auto& send = keep<GuardedBuffer>(n * slot * es);
  auto& recv = keep<GuardedBuffer>(n * slot * es);
  Rng rng(testSeed());
  // Strided groups (sendrecv_ll computes their addresses, strided_group.cuh): ring, self, ungrouped, ring
  // both ways, AllToAll (one count for every pair, chunk p at p * slot on both sides); AllPairs (random
  // counts) runs the segment lists; AllToAllMixed: as AllToAll, but odd ranks add a zero-byte send and
  // receive with themselves, so their groups run the segment lists against their peers' strided plans.
  enum Pattern {
    Ring,
    AllPairs,
    AllPairsWithSelf,
    SelfOnly,
    Ungrouped,
    RingBothDirections,
    AllToAll,
    AllToAllMixed
  };
  const char* names[] = {"ring",
                         "all-pairs",
                         "all-pairs+self",
                         "self",
                         "ungrouped pairs",
                         "ring both ways",
                         "alltoall-shaped",
                         "alltoall-shaped, odd ranks not strided"};
  int iter = 0;
  for (const char* algo : {"sendrecv_ll", "sendrecv_scratch"}) {
    ScopedAlgorithm forced(cc(), Collective::SendRecv, algo);
    if (!selectionOverridden() && selectedSendRecv(cc()) != algo)
      fail(algo, detail::concat("selected ", selectedSendRecv(cc())));
    for (int pattern = Ring; pattern <= AllToAllMixed; ++pattern) {
      for (uint64_t maxCount : {1ull, 3ull, 1023ull, 65536ull}) {
        for (int rep = 0; rep < 3; ++rep, ++iter) {
          const uint64_t seed = rng.next();
          Rng r2(seed);
          // counts[src][dst], zero allowed in all-pairs patterns (zero-size operations still pair up)
          std::vector<uint64_t> m(n * n);
          for (auto& v : m) v = (pattern == AllPairs && r2.next() % 5 == 0) ? 0 : r2.uniform(1, maxCount);
          if (pattern == AllToAll || pattern == AllToAllMixed) std::fill(m.begin(), m.end(), m[0]);
          std::vector<std::pair<int, int>> ops;  // (kind 0 send / 1 recv, peer), in call order
          const int next = (me + 1) % n, prev = (me + n - 1) % n;
          switch (pattern) {
            case Ring:
              ops = {{0, next}, {1, prev}};
              break;
            case RingBothDirections:
              ops = {{1, next}, {0, prev}, {0, next}, {1, prev}};
              if (n == 2) ops = {{0, next}, {1, prev}};  // next == prev: one pair
              break;
            case AllPairs:
            case AllPairsWithSelf:
            case AllToAll:
            case AllToAllMixed:
              for (int p = 0; p < n; ++p) {
                if (p == me && pattern == AllPairs) continue;
                ops.push_back({0, p});
                ops.push_back({1, p});
              }
              break;
            case SelfOnly:
              ops = {{1, me}, {0, me}};
              break;
            case Ungrouped:
              if ((me ^ 1) < n) {
                const int partner = me ^ 1;
                if (me % 2 == 0)
                  ops = {{0, partner}, {1, partner}};
                else
                  ops = {{1, partner}, {0, partner}};
              }
              break;
          }
          GenSpec g{t, ValueKind::General, n, seed | 1};
          const uint8_t P = static_cast<uint8_t>(seed >> 32);
          const std::string ctx =
              detail::concat(algo, " ", names[pattern], " maxCount ", maxCount, " rep ", rep);
          const bool ok = tryCase(ctx, [&] {
            send.poison(stream(), static_cast<uint8_t>(~P));
            recv.poison(stream(), P);
            for (auto [kind, peer] : ops)
              if (kind == 0)
                fillGenerated(stream(), send.at(peer * slot * es), m[me * n + peer], g, me, peer * slot);
            const bool grouped = pattern != Ungrouped;
            if (grouped) cc().groupStart();
            for (auto [kind, peer] : ops) {
              if (kind == 0)
                cc().send(send.at(peer * slot * es), m[me * n + peer], t, peer, stream());
              else
                cc().recv(recv.at(peer * slot * es), m[peer * n + me], t, peer, stream());
            }
            if (pattern == AllToAllMixed && me % 2 == 1) {
              cc().send(send.at(me * slot * es), 0, t, me, stream());
              cc().recv(recv.at(me * slot * es), 0, t, me, stream());
            }
            if (grouped) cc().groupEnd();
            MESHCOMM_TEST_CHECK_LAUNCH();
            // Expected: slot p holds m[p][me] elements from p where a recv from p was posted, poison
            // elsewhere.
            std::vector<uint8_t> host(n * slot * es);
            MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
            MESHCOMM_CUDA_CHECK(cudaMemcpy(host.data(), recv.at(0), host.size(), cudaMemcpyDeviceToHost));
            std::vector<char> recvFrom(n, 0);
            for (auto [kind, peer] : ops)
              if (kind == 1) recvFrom[peer] = 1;
            uint64_t bad = 0;
            std::string first;
            for (int p = 0; p < n; ++p) {
              const uint64_t cnt = recvFrom[p] ? m[p * n + me] : 0;
              for (uint64_t i = 0; i < slot; ++i) {
                uint32_t got;
                std::memcpy(&got, host.data() + (p * slot + i) * es, 4);
                const uint32_t want =
                    i < cnt ? static_cast<uint32_t>(genBits(g, p, me * slot + i)) : P * 0x01010101u;
                if (got != want && bad++ == 0)
                  first = detail::concat("slot of rank ", p, " element ", i, " (", cnt, " expected): got 0x",
                                         std::hex, got, ", expected 0x", want);
              }
            }
            failIfWrong(ctx, recv, n * slot * es, P, bad, first, "elements");
          });
          if (!everyRankOk(ok, ctx)) {
            EXPECT_EQ(failures_, 0u);
            return;
          }
        }
      }
    }
  }
  EXPECT_EQ(failures_, 0u);
}

// A send that reads what a receive earlier in the same group writes runs after it (p2p_phases.hpp): the
// hypercube allgather nccl-tests runs in its -g mode (log2 n steps, step k sending the 2^k chunks gathered
// so far, in one group), or a chain (rank k receives rank 0's chunk from k - 1 and forwards the same buffer
// to k + 1, the last rank to itself into the next chunk, in one group: a split on 2 ranks too). Both
// algorithms; sizes on LL packets and on the stream engine.
void Collectives::dependentStepsInOneGroup(bool hypercube) {
  const int n = worldSize(), me = rank();
  const DataType t = DataType::F32;
  const uint64_t es = 4, maxCount = 70000;
  auto& buf = keep<GuardedBuffer>(n * maxCount * es);
  Rng rng(testSeed());
  for (const char* algo : {"sendrecv_ll", "sendrecv_scratch"}) {
    ScopedAlgorithm forced(cc(), Collective::SendRecv, algo);
    for (uint64_t count : {1ull, 1023ull, 70000ull}) {
      const uint64_t seed = rng.next();
      GenSpec g{t, ValueKind::General, n, seed | 1};
      const uint8_t P = static_cast<uint8_t>(seed >> 32);
      const std::string ctx = detail::concat(algo, hypercube ? " hypercube" : " chain", " count ", count);
      const int chunks = hypercube ? n : me == n - 1 ? 2 : 1;  // written; chunk c at c * count elements
      const bool ok = tryCase(ctx, [&] {
        buf.poison(stream(), P);
        if (hypercube || me == 0)
          fillGenerated(stream(), buf.at((hypercube ? me : 0) * count * es), count, g, me, 0);
        cc().groupStart();
        if (hypercube) {
          for (int mask = 1; mask < n; mask <<= 1) {
            const int s = me & ~(mask - 1), r = s ^ mask;
            cc().send(buf.at(s * count * es), count * mask, t, me ^ mask, stream());
            cc().recv(buf.at(r * count * es), count * mask, t, me ^ mask, stream());
          }
        } else {
          if (me > 0) cc().recv(buf.at(0), count, t, me - 1, stream());
          if (me + 1 < n) cc().send(buf.at(0), count, t, me + 1, stream());
          if (me == n - 1) {
            cc().send(buf.at(0), count, t, me, stream());
            cc().recv(buf.at(count * es), count, t, me, stream());
          }
        }
        cc().groupEnd();
        MESHCOMM_TEST_CHECK_LAUNCH();
        std::vector<uint32_t> host(chunks * count);
        MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
        MESHCOMM_CUDA_CHECK(cudaMemcpy(host.data(), buf.at(0), host.size() * es, cudaMemcpyDeviceToHost));
        std::vector<uint32_t> want(host.size());  // chunk c: rank c's input (the chain: rank 0's)
        for (size_t k = 0; k < want.size(); ++k)
          want[k] = static_cast<uint32_t>(genBits(g, hypercube ? static_cast<int>(k / count) : 0, k % count));
        const uint64_t bad = std::inner_product(host.begin(), host.end(), want.begin(), uint64_t{0},
                                                std::plus<>(), std::not_equal_to<>());
        const size_t k = std::mismatch(host.begin(), host.end(), want.begin()).first - host.begin();
        const std::string first =
            k == host.size() ? std::string()
                             : detail::concat("chunk ", k / count, " element ", k % count, ": got 0x",
                                              std::hex, host[k], ", expected 0x", want[k]);
        failIfWrong(ctx, buf, chunks * count * es, P, bad, first, "elements");
      });
      if (!everyRankOk(ok, ctx)) {
        EXPECT_EQ(failures_, 0u);
        return;
      }
    }
  }
  EXPECT_EQ(failures_, 0u);
}

TEST_F(Collectives, SendRecvDependentChainInOneGroup) {
  dependentStepsInOneGroup(false);
}

TEST_F(Collectives, SendRecvDependentHypercubeInOneGroup) {
  const int n = worldSize();
  if ((n & (n - 1)) != 0)
    GTEST_SKIP() << "the hypercube needs a power-of-two world; this one has " << n << " ranks";
  dependentStepsInOneGroup(true);
}

// Several operations per peer with odd byte sizes and unaligned buffers (operation boundaries cut LL
// packets), uint8 and half operations mixed in one group (a group carries bytes; the sides may use
// different dtypes), operations with oneself, and (every 4th group) pairs above the LL capacity next to
// pairs below it; both sendrecv algorithms.
TEST_F(Collectives, SendRecvManyOpsPerPeerOddSizes) {
  const int n = worldSize(), me = rank();
  const uint64_t region = 512 << 10;  // bytes per peer in each buffer (ops + gaps stay below it)
  const int maxOps = 5, iters = longRun() ? 120 : 40;
  auto& send = keep<GuardedBuffer>(n * region);
  auto& recv = keep<GuardedBuffer>(n * region);
  Rng rng(testSeed());
  struct Op {
    uint64_t bytes;
    uint32_t sendGap, recvGap;  // bytes skipped before the operation's buffer on each side
    bool sendHalf, recvHalf;    // posted as half elements (even sizes only) instead of uint8
  };
  for (const char* algo : {"sendrecv_ll", "sendrecv_scratch"}) {
    ScopedAlgorithm forced(cc(), Collective::SendRecv, algo);
    for (int it = 0; it < iters; ++it) {
      const uint64_t seed = rng.next();
      Rng r(seed);
      const bool big = it % 4 == 3;
      std::vector<std::vector<Op>> ops(n * n);  // ops[src * n + dst], equal on every rank
      for (auto& list : ops) {
        const uint64_t k = r.uniform(0, maxOps);
        for (uint64_t j = 0; j < k; ++j) {
          Op o;
          o.bytes = big && r.next() % 3 == 0 ? r.uniform(1, 90000) : r.uniform(1, 40);
          o.sendGap = static_cast<uint32_t>(r.next() % 4);
          o.recvGap = static_cast<uint32_t>(r.next() % 4);
          o.sendHalf = o.bytes % 2 == 0 && r.next() % 2;
          o.recvHalf = o.bytes % 2 == 0 && r.next() % 2;
          list.push_back(o);
        }
      }
      GenSpec g{DataType::U8, ValueKind::General, n, seed | 1};
      const uint8_t P = static_cast<uint8_t>(seed >> 32);
      // Buffer of operation j of `list` in a region: gaps, half operations 2-byte aligned.
      auto placeAll = [](const std::vector<Op>& list, bool sending) {
        std::vector<uint64_t> at;
        uint64_t off = 0;
        for (const Op& o : list) {
          off += sending ? o.sendGap : o.recvGap;
          if (sending ? o.sendHalf : o.recvHalf) off = (off + 1) & ~uint64_t{1};
          at.push_back(off);
          off += o.bytes;
        }
        return at;
      };
      const std::string ctx = detail::concat(algo, " many ops, group ", it, big ? " (large pairs)" : "");
      const bool ok = tryCase(ctx, [&] {
        send.poison(stream(), static_cast<uint8_t>(~P));
        recv.poison(stream(), P);
        // (kind, peer, op index) in a rank-local random order that keeps each (kind, peer) in order.
        struct Posted {
          bool isSend;
          int peer;
          size_t j;
        };
        std::vector<Posted> order;
        std::vector<size_t> nextSend(n, 0), nextRecv(n, 0);
        Rng local(seed ^ (static_cast<uint64_t>(me) << 20));
        for (;;) {
          std::vector<Posted> ready;
          for (int p = 0; p < n; ++p) {
            if (nextSend[p] < ops[me * n + p].size()) ready.push_back({true, p, nextSend[p]});
            if (nextRecv[p] < ops[p * n + me].size()) ready.push_back({false, p, nextRecv[p]});
          }
          if (ready.empty()) break;
          const Posted q = ready[local.next() % ready.size()];
          (q.isSend ? nextSend : nextRecv)[q.peer]++;
          order.push_back(q);
        }
        for (int p = 0; p < n; ++p) {
          const auto& list = ops[me * n + p];
          const auto at = placeAll(list, true);
          uint64_t pos = 0;
          for (size_t j = 0; j < list.size(); ++j) {
            fillGenerated(stream(), send.at(0) + p * region + at[j], list[j].bytes, g, me,
                          (static_cast<uint64_t>(p) << 32) + pos);
            pos += list[j].bytes;
          }
        }
        if (!order.empty()) {
          cc().groupStart();
          for (const Posted& q : order) {
            const int src = q.isSend ? me : q.peer, dst = q.isSend ? q.peer : me;
            const Op& o = ops[src * n + dst][q.j];
            const uint64_t off = q.peer * region + placeAll(ops[src * n + dst], q.isSend)[q.j];
            const bool half = q.isSend ? o.sendHalf : o.recvHalf;
            const DataType t = half ? DataType::F16 : DataType::U8;
            const uint64_t count = half ? o.bytes / 2 : o.bytes;
            if (q.isSend)
              cc().send(send.at(0) + off, count, t, q.peer, stream());
            else
              cc().recv(recv.at(0) + off, count, t, q.peer, stream());
          }
          cc().groupEnd();
          MESHCOMM_TEST_CHECK_LAUNCH();
        }
        // Expected receive region of peer p: p's stream for me, operation by operation; poison elsewhere.
        std::vector<uint8_t> want(n * region, P), host(n * region);
        for (int p = 0; p < n; ++p) {
          const auto& list = ops[p * n + me];
          const auto at = placeAll(list, false);
          uint64_t pos = 0;
          for (size_t j = 0; j < list.size(); ++j)
            for (uint64_t i = 0; i < list[j].bytes; ++i, ++pos)
              want[p * region + at[j] + i] =
                  static_cast<uint8_t>(genBits(g, p, (static_cast<uint64_t>(me) << 32) + pos));
        }
        MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
        MESHCOMM_CUDA_CHECK(cudaMemcpy(host.data(), recv.at(0), host.size(), cudaMemcpyDeviceToHost));
        uint64_t bad = 0;
        std::string first;
        for (uint64_t b = 0; b < host.size(); ++b) {
          if (host[b] != want[b] && bad++ == 0)
            first = detail::concat("byte ", b % region, " of the region of rank ", b / region, ": got ",
                                   int{host[b]}, ", expected ", int{want[b]});
        }
        failIfWrong(ctx, recv, n * region, P, bad, first, "bytes");
      });
      if (!everyRankOk(ok, ctx)) {
        EXPECT_EQ(failures_, 0u);
        return;
      }
    }
  }
  EXPECT_EQ(failures_, 0u);
}

// A receiver whose counts disagree with its sender (both sides on the same path: LL below the capacity,
// the pairwise engine above it) records a count mismatch naming the sender. On the LL path the sender
// completes, and the receiver writes nothing past its own count nor past the sender's count rounded up to a
// whole LL packet (the LL receive does not wait for the count before it unpacks; the zero padding of the
// sender's last packet may land). In the engine both sides cut the pieces by their own counts and check the
// peer's header while they wait, so both report (the sender: "this rank sent"), and the receiver writes
// nothing past its own count. Rank 1 receives from rank 0; sendrecv, host-counts alltoallv, a group shaped
// like an alltoall in which rank 1's group is strided (sendrecv_ll computes its addresses) and rank 0's is
// not when n > 2 (one count differs), and a receive split in two operations whose sizes add up to the send
// (equal bytes, other operation sizes: the signatures differ). The error is fatal for a Comm, so every case
// ends with a fresh one.
TEST_F(Collectives, CountMismatchIsReportedAndNothingIsWrittenPast) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int n = worldSize(), me = rank();
  enum Kind { SendRecv, AllToAllv, StridedGroup, SplitRecv };
  struct MismatchCase {
    Kind kind;
    uint64_t sent, expected;  // bytes rank 0 sends to rank 1 / rank 1 expects from rank 0
    bool engine;              // both counts above the LL capacity
  };
  // Engine cases: both counts above the largest LL capacity (a pair whose two sides straddle the
  // capacity takes different paths on the two sides and times out instead; see ll_stream.hpp).
  const uint64_t big = movement::kLLStreamCapacities[0] + 100000;
  const MismatchCase cases[] = {
      {SendRecv, 4000, 3000, false},              // LL, receiver expects less
      {SendRecv, 3000, 4004, false},              // LL, receiver expects more
      {SendRecv, 3001, 4004, false},              // LL, receiver expects more, the last packet partial
      {SendRecv, big, big - 100000 + 8, true},    // engine, receiver expects less
      {SendRecv, big - 100000 + 8, big, true},    // engine, receiver expects more
      {SplitRecv, big, big, true},                // engine, equal bytes in other operation sizes
      {AllToAllv, 4000, 3000, false},             // alltoallv_ll, LL pair
      {AllToAllv, big, big - 100000 + 16, true},  // alltoallv_ll, engine pair
      {StridedGroup, 4000, 3000, false},          // every pair LL, receiver strided, expects less
      {StridedGroup, 3001, 4004, false},          // ... expects more, the sender's last packet is partial
  };
  const uint64_t cap = big;
  auto& send = keep<GuardedBuffer>(n * cap);
  auto& recv = keep<GuardedBuffer>(n * cap);
  const uint8_t P = 0x5C;
  for (const MismatchCase& mc : cases) {
    const char* kinds[] = {"sendrecv", "alltoallv", "strided group", "split receive"};
    const std::string ctx = detail::concat(kinds[mc.kind], " sent ", mc.sent, " expected ", mc.expected);
    runFatalCase(ctx, [&] {
      send.poison(stream(), static_cast<uint8_t>(~P));
      recv.poison(stream(), P);
      if (mc.kind == StridedGroup) {
        // Chunk p at p * cap on both sides, `expected` bytes everywhere but rank 0's send to rank 1.
        cc().groupStart();
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          cc().send(send.at(p * cap), me == 0 && p == 1 ? mc.sent : mc.expected, DataType::U8, p, stream());
          cc().recv(recv.at(p * cap), mc.expected, DataType::U8, p, stream());
        }
        cc().groupEnd();
      } else if (mc.kind == AllToAllv) {
        // Everyone else exchanges nothing; rank 0 -> rank 1 disagrees.
        std::vector<size_t> sc(n, 0), sd(n, 0), rc(n, 0), rd(n, 0);
        if (me == 0) sc[1] = mc.sent;
        if (me == 1) rc[0] = mc.expected;
        cc().allToAllv(send.at(0), sc.data(), sd.data(), recv.at(0), rc.data(), rd.data(), DataType::U8,
                       stream());
      } else if (me == 0) {
        cc().send(send.at(0), mc.sent, DataType::U8, 1, stream());
      } else if (me == 1 && mc.kind == SplitRecv) {
        const uint64_t half = mc.expected / 2 / 16 * 16;
        cc().groupStart();
        cc().recv(recv.at(0), half, DataType::U8, 0, stream());
        cc().recv(recv.at(half), mc.expected - half, DataType::U8, 0, stream());
        cc().groupEnd();
      } else if (me == 1) {
        cc().recv(recv.at(0), mc.expected, DataType::U8, 0, stream());
      }
      MESHCOMM_TEST_CHECK_LAUNCH();
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
      const std::optional<std::string> error = recordedError();
      const bool reports = me == 1 || (me == 0 && mc.engine);
      if (!reports) {
        if (error) fail(ctx, "unexpected error: " + *error);
        return;
      }
      const std::string want = detail::concat("counts disagree with peer ", 1 - me);
      if (!error)
        fail(ctx, "no count mismatch reported");
      else if (error->find(want) == std::string::npos)
        fail(ctx, "unexpected error: " + *error);
      if (me == 0) return;  // the sender's buffers are not written
      // Nothing past the bound (the receive may have stopped early: the error aborts).
      const uint64_t bound = mc.engine ? mc.expected : std::min((mc.sent + 7) / 8 * 8, mc.expected);
      uint64_t past = 0;
      if (mc.kind == StridedGroup) {
        // Chunk 0 as above; the other peers' chunks (which may stop early too) hold nothing past
        // `expected`, the own chunk nothing at all.
        std::vector<uint8_t> host(n * cap);
        MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
        MESHCOMM_CUDA_CHECK(cudaMemcpy(host.data(), recv.at(0), host.size(), cudaMemcpyDeviceToHost));
        for (int p = 0; p < n; ++p) {
          const uint64_t from = p == 0 ? bound : p == me ? 0 : mc.expected;
          past += std::count_if(host.begin() + p * cap + from, host.begin() + (p + 1) * cap,
                                [&](uint8_t b) { return b != P; });
        }
      } else {
        recv.countOutside(stream(), recv.at(0), bound, P, counters_.at(0));
        past = counters_.collect(stream())[0];
      }
      if (past != 0) fail(ctx, detail::concat(past, " bytes written past the received count"));
    });
  }
  EXPECT_EQ(failures_, 0u);
}

// Ranks 0 and 1 send to each other and neither posts a receive (NCCL hangs): both report that the other
// sent what they did not expect, promptly (not a timeout), on the LL path and on the engine's with streams
// of more pieces than a lane's buffers hold: there each block stops waiting for a credit when the peer's
// header, which its credit waits poll, disagrees with its plan (PeerHeaderCheck). Other ranks do nothing.
// The error is fatal for a Comm: a fresh one per case.
TEST_F(Collectives, SendsWithoutReceivesAreReportedOnBothSides) {
  MESHCOMM_TEST_REQUIRE_RANKS(2);
  const int me = rank();
  // Engine: 256 MiB is more than 4 rounds (kEngineSlots buffers per lane) of the engine's largest pieces at
  // 2-8 ranks (~40 MiB per round at n = 2), so the senders must wait for credits that never come.
  const uint64_t sizes[] = {4000, uint64_t{256} << 20};
  auto& send = keep<GuardedBuffer>(sizes[1]);
  for (uint64_t bytes : sizes) {
    const std::string ctx = detail::concat(bytes, " bytes each way between ranks 0 and 1, no receives");
    runFatalCase(ctx, [&] {
      if (me < 2) {
        send.poison(stream(), 0x3A);
        cc().send(send.at(0), bytes, DataType::U8, 1 - me, stream());
      }
      MESHCOMM_TEST_CHECK_LAUNCH();
      const auto t0 = std::chrono::steady_clock::now();
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::optional<std::string> error = recordedError();
      if (me >= 2) {
        if (error) fail(ctx, "unexpected error: " + *error);
        return;
      }
      if (!error)
        fail(ctx, "no error reported");
      else if (error->find(detail::concat("counts disagree with peer ", 1 - me)) == std::string::npos)
        fail(ctx, "unexpected error: " + *error);
      if (ms > 2000) fail(ctx, detail::concat("took ", ms, " ms (a timeout, not the header's refusal?)"));
    });
  }
  EXPECT_EQ(failures_, 0u);
}

// ---------------------------------------------------------------------------------------------------------
// barrier
// ---------------------------------------------------------------------------------------------------------

__global__ void sleepKernel(uint64_t ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
    __nanosleep(1000);
  }
}

// One slow rank (200 ms of device work before its barrier): every other rank's barrier must not complete
// before about that time; then 200 back-to-back barriers complete.
TEST_F(Collectives, BarrierWaitsForTheSlowestRank) {
  const int n = worldSize();
  constexpr uint64_t kDelayMs = 200;
  for (int slow = 0; slow < n; ++slow) {
    bootstrap().barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (rank() == slow) {
      sleepKernel<<<1, 1, 0, stream()>>>(kDelayMs * 1000000ull);
      MESHCOMM_TEST_CHECK_LAUNCH();
    }
    cc().barrier(stream());
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(ms, kDelayMs * 0.75) << "rank " << rank() << " left the barrier before slow rank " << slow
                                   << " reached it";
    EXPECT_LT(ms, 10000.0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) cc().barrier(stream());
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (rank() == 0) std::printf("[ INFO ] 200 barriers: %.1f us each\n", ms * 1000 / 200);
  EXPECT_NO_THROW(cc().checkError());
}

// Two Comms torn down in opposite orders on even and odd ranks (torch's destroy_process_group order differs
// between ranks): beginClose on both, then destruction in either order, completes; launches after beginClose
// are refused. With a blocking agreement inside the destructor alone this deadlocks (until the timeout).
TEST_F(Collectives, CommsClosedInDifferentOrdersOnDifferentRanks) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::unique_ptr<Comm> a = freshComm();
  std::unique_ptr<Comm> b = freshComm();
  constexpr size_t kCount = 4099;
  float* buf = nullptr;
  MESHCOMM_CUDA_CHECK(cudaMalloc(&buf, kCount * sizeof(float)));
  std::vector<float> host(kCount, static_cast<float>(rank() + 1));
  for (Comm* c : {a.get(), b.get()}) {  // both hold live connections and contexts
    copyToDevice(buf, host.data(), kCount * sizeof(float));
    c->allReduce(buf, buf, kCount, DataType::F32, ReduceOpSpec(), stream());
    std::vector<float> got(kCount);
    MESHCOMM_CUDA_CHECK(
        cudaMemcpyAsync(got.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream()));
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    const float expected = worldSize() * (worldSize() + 1) / 2.0f;
    EXPECT_EQ(std::count(got.begin(), got.end(), expected), static_cast<long>(kCount));
  }
  const bool odd = rank() % 2 == 1;
  std::unique_ptr<Comm>& first = odd ? b : a;
  std::unique_ptr<Comm>& second = odd ? a : b;
  const auto t0 = std::chrono::steady_clock::now();
  first->beginClose();
  second->beginClose();
  EXPECT_THROW(first->allReduce(buf, buf, kCount, DataType::F32, ReduceOpSpec(), stream()), Error);
  first.reset();  // a on even ranks, b on odd ranks: the peers free them in the other order
  second.reset();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0) << "rank " << rank() << ": the teardown waited for a peer tearing down another Comm";
  MESHCOMM_CUDA_CHECK(cudaFree(buf));
}

// An allreduce algorithm whose setup allocates device memory (as a native algorithm's scratch does); never
// selected (unsupported everywhere), never launched.
class AllocatingSetupAlgorithm : public Algorithm {
 public:
  std::string name() const override { return "test_allocating_setup"; }
  Collective collective() const override { return Collective::AllReduce; }
  void initialize(CommResources&) override {
    void* p = nullptr;
    MESHCOMM_CUDA_CHECK(cudaMalloc(&p, 1 << 20));
    MESHCOMM_CUDA_CHECK(cudaFree(p));
  }
  std::string unsupportedReason(const CollectiveArgs&, const CommTopology&) const override {
    return "a test algorithm";
  }
  LaunchConfig defaultConfig(const CollectiveArgs&, const CommTopology&) const override { return {}; }
  void launch(CommResources&, const CollectiveArgs&, const LaunchConfig&, void*) override {
    MESHCOMM_THROW(ErrorCode::InternalError, "test_allocating_setup is never launched");
  }
};

// Adding an algorithm while this thread captures a CUDA graph (global mode: device allocation is not
// allowed) fails with a message saying to set up before capture, leaves the collection unchanged, and the
// same algorithm can be added once the capture is over.
TEST_F(Collectives, AddAlgorithmDuringCaptureFailsCleanlyAndCanBeRepeated) {
  std::unique_ptr<Comm> c = freshComm();
  cudaStream_t s = nullptr;
  MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  MESHCOMM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  std::string message;
  try {
    c->addAlgorithm(std::make_shared<AllocatingSetupAlgorithm>());
  } catch (const Error& e) {
    message = e.what();
  }
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &g);  // invalidated by the refused allocation
  if (g) MESHCOMM_CUDA_CHECK(cudaGraphDestroy(g));
  (void)cudaGetLastError();
  EXPECT_NE(end, cudaSuccess) << "the capture should have been invalidated";
  for (const char* part : {"rank ", "test_allocating_setup", "before capture"})
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  EXPECT_EQ(c->algorithms().find("test_allocating_setup"), nullptr) << "a failed add left the algorithm in";
  c->addAlgorithm(std::make_shared<AllocatingSetupAlgorithm>());
  EXPECT_NE(c->algorithms().find("test_allocating_setup"), nullptr);
  MESHCOMM_CUDA_CHECK(cudaStreamDestroy(s));
  c.reset();
}

// ---------------------------------------------------------------------------------------------------------
// CUDA graphs: capture once, replay 20 times with fresh data
// ---------------------------------------------------------------------------------------------------------

TEST_F(Collectives, GraphCaptureReplayWithFreshInputs) {
  const int n = worldSize(), me = rank();
  constexpr int kReplays = 20;
  const uint64_t arCount = 100003, agCount = 4099, rsCount = 20001, bcCount = 777, a2avMax = 3000,
                 p2pCount = 5000;
  auto& arBuf = keep<GuardedBuffer>(arCount * 4);   // allreduce f32 sum, in place
  auto& agSend = keep<GuardedBuffer>(agCount * 2);  // allgather bf16
  auto& agRecv = keep<GuardedBuffer>(n * agCount * 2);
  auto& rsSend = keep<GuardedBuffer>(n * rsCount * 4);  // reduce_scatter i32 max
  auto& rsRecv = keep<GuardedBuffer>(rsCount * 4);
  auto& bcBuf = keep<GuardedBuffer>(bcCount * 8);   // broadcast f64 root n-1, in place
  auto& pSend = keep<GuardedBuffer>(p2pCount * 4);  // ring send/recv group
  auto& pRecv = keep<GuardedBuffer>(p2pCount * 4);
  auto& a2av = keep<AllToAllvRunner>(n, a2avMax, DataType::F16);
  auto& deviceScalarBuf = keep<GpuBuffer>(8);        // premulsum device scalar for allreduce #2
  auto& ar2Send = keep<GuardedBuffer>(arCount * 2);  // allreduce f16 premulsum(device), out of place
  auto& ar2Recv = keep<GuardedBuffer>(arCount * 2);
  const RedCase pm{ReduceOp::PreMulSum, true};
  {
    const uint64_t bits = encodeExactFloat(preMulScalar(DataType::F16, true, me), DataType::F16);
    copyToDevice(deviceScalarBuf.data(), &bits, 2);
  }
  const int bcRoot = n - 1, next = (me + 1) % n, prev = (me + n - 1) % n;
  cudaStream_t s = stream();

  struct Iter {
    uint64_t seed;
    GenSpec ar, ag, rs, bc, a2, p2, ar2;
    Splits sp;
    uint8_t P;
  };
  auto makeIter = [&](uint64_t seed) {
    Iter it;
    it.seed = seed;
    it.ar = {DataType::F32, ValueKind::General, n, seed ^ 1};
    it.ag = {DataType::BF16, ValueKind::General, n, seed ^ 2};
    it.rs = {DataType::I32, ValueKind::General, n, seed ^ 3};
    it.bc = {DataType::F64, ValueKind::General, n, seed ^ 4};
    it.a2 = {DataType::F16, ValueKind::General, n, seed ^ 5};
    it.p2 = {DataType::F32, ValueKind::General, n, seed ^ 6};
    it.ar2 = {DataType::F16, ValueKind::General, n, seed ^ 7};
    it.sp = randomSplits(seed, n, me, a2avMax);
    it.P = static_cast<uint8_t>(seed >> 24);
    return it;
  };
  // Fresh inputs (outside the graph, on the same stream before the launch).
  auto prepare = [&](const Iter& it) {
    arBuf.poison(s, it.P);
    fillGenerated(s, arBuf.at(0), arCount, it.ar, me);
    agSend.poison(s, static_cast<uint8_t>(~it.P));
    agRecv.poison(s, it.P);
    fillGenerated(s, agSend.at(0), agCount, it.ag, me);
    rsSend.poison(s, static_cast<uint8_t>(~it.P));
    rsRecv.poison(s, it.P);
    fillGenerated(s, rsSend.at(0), n * rsCount, it.rs, me);
    bcBuf.poison(s, it.P);
    fillGenerated(s, bcBuf.at(0), bcCount, it.bc, me);
    pSend.poison(s, static_cast<uint8_t>(~it.P));
    pRecv.poison(s, it.P);
    fillGenerated(s, pSend.at(0), p2pCount, it.p2, me);
    ar2Send.poison(s, static_cast<uint8_t>(~it.P));
    ar2Recv.poison(s, it.P);
    fillGenerated(s, ar2Send.at(0), arCount, it.ar2, me);
    a2av.prepare(s, it.sp, it.a2, me, it.P);  // device counts change every replay
  };
  // The captured sequence; everything reads its arguments from fixed pointers.
  auto sequence = [&] {
    cc().allReduce(arBuf.at(0), arBuf.at(0), arCount, DataType::F32, ReduceOp::Sum, s);
    cc().allGather(agSend.at(0), agRecv.at(0), agCount, DataType::BF16, s);
    cc().reduceScatter(rsSend.at(0), rsRecv.at(0), rsCount, DataType::I32, ReduceOp::Max, s);
    cc().broadcast(bcBuf.at(0), bcBuf.at(0), bcCount, DataType::F64, bcRoot, s);
    a2av.call(cc(), s, DataType::F16, true);
    cc().groupStart();
    cc().send(pSend.at(0), p2pCount, DataType::F32, next, s);
    cc().recv(pRecv.at(0), p2pCount, DataType::F32, prev, s);
    cc().groupEnd();
    cc().allReduce(ar2Send.at(0), ar2Recv.at(0), arCount, DataType::F16,
                   ReduceOpSpec::preMulSumDevice(deviceScalarBuf.data()), s);
    cc().barrier(s);
  };
  auto check = [&](const Iter& it, const std::string& ctx) {
    const RedCase sum{ReduceOp::Sum, false}, mx{ReduceOp::Max, false};
    auto cmp = [&](const char* what, const void* p, uint64_t count, DataType t,
                   const std::function<Expected(uint64_t)>& e) {
      const Comparison c = compareOutput(p, count, t, e);
      if (c.mismatches) fail(ctx + " " + what, detail::concat(c.mismatches, " wrong; ", c.first));
      return c.hash;
    };
    arBuf.countOutside(s, arBuf.at(0), arCount * 4, it.P, counters_.at(0));
    agRecv.countOutside(s, agRecv.at(0), n * agCount * 2, it.P, counters_.at(0));
    rsRecv.countOutside(s, rsRecv.at(0), rsCount * 4, it.P, counters_.at(0));
    bcBuf.countOutside(s, bcBuf.at(0), bcCount * 8, it.P, counters_.at(0));
    pRecv.countOutside(s, pRecv.at(0), p2pCount * 4, it.P, counters_.at(0));
    ar2Recv.countOutside(s, ar2Recv.at(0), arCount * 2, it.P, counters_.at(0));
    const auto k = counters_.collect(s);
    if (k[0] != 0) fail(ctx, detail::concat(k[0], " poisoned bytes outside the outputs changed"));
    uint64_t h = cmp("allreduce f32 sum", arBuf.at(0), arCount, DataType::F32,
                     [&](uint64_t i) { return reduceExpected(it.ar, sum, i); });
    h ^= mix64(cmp("allreduce f16 premulsum(device)", ar2Recv.at(0), arCount, DataType::F16,
                   [&](uint64_t i) { return reduceExpected(it.ar2, pm, i); }));
    cmp("allgather bf16", agRecv.at(0), n * agCount, DataType::BF16,
        [&](uint64_t j) { return copyExpected(it.ag, static_cast<int>(j / agCount), j % agCount); });
    cmp("reduce_scatter i32 max", rsRecv.at(0), rsCount, DataType::I32,
        [&](uint64_t i) { return reduceExpected(it.rs, mx, me * rsCount + i); });
    cmp("broadcast f64", bcBuf.at(0), bcCount, DataType::F64,
        [&](uint64_t i) { return copyExpected(it.bc, bcRoot, i); });
    cmp("sendrecv ring", pRecv.at(0), p2pCount, DataType::F32,
        [&](uint64_t i) { return copyExpected(it.p2, prev, i); });
    const std::string err = a2av.check(s, it.sp, it.a2, me, it.P, counters_);
    if (!err.empty()) fail(ctx + " alltoallv f16 device counts", err);
    return h;
  };

  Rng rng(testSeed());
  bool ok = true;
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  try {
    // Eager warm-up (builds any per-buffer context before capture), checked like a replay.
    {
      const Iter it = makeIter(rng.next());
      prepare(it);
      sequence();
      MESHCOMM_TEST_CHECK_LAUNCH();
      check(it, "eager warm-up");
    }
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(s));
    MESHCOMM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    try {
      sequence();
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(s, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    MESHCOMM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    MESHCOMM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  } catch (const std::exception& e) {
    fail("capture", e.what());
    ok = false;
  }
  if (!agree(ok, 0).allOk) {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    FAIL() << "warm-up or capture failed on a rank";
  }
  for (int r = 0; r < kReplays; ++r) {
    const Iter it = makeIter(rng.next());
    const std::string ctx = detail::concat("replay ", r);
    uint64_t h = 0;
    ok = tryCase(ctx, [&] {
      prepare(it);
      MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, s));
      h = check(it, ctx);
    });
    const Agreement a = agree(ok, h);
    if (!a.sameHash) fail(ctx, "allreduce outputs differ between ranks (hash)");
    if (!a.allOk) {
      ADD_FAILURE() << "stopping at " << ctx << ": a rank saw an exception";
      break;
    }
  }
  cudaStreamSynchronize(s);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_EQ(failures_, 0u);
}

// ---------------------------------------------------------------------------------------------------------
// Soak: 10^4 calls mixing sizes, ops and alltoallv splits; device memory stays flat
// ---------------------------------------------------------------------------------------------------------

TEST_F(Collectives, Soak10kCallsMemoryFlat) {
  const int n = worldSize(), me = rank();
  const int calls = longRun() ? 50000 : 10000;
  const uint64_t maxCount = 1 << 16;
  auto& send = keep<GuardedBuffer>(n * maxCount * 4);
  auto& recv = keep<GuardedBuffer>(n * maxCount * 4);
  AllToAllvRunner a2av(n, 4096, DataType::F32);
  const DataType types[] = {DataType::F32, DataType::BF16, DataType::I32, DataType::U8};
  const Collective colls[] = {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                              Collective::Broadcast, Collective::AllToAll,  Collective::Reduce};
  Rng rng(testSeed());
  size_t freeBefore = 0;
  int k = 0;
  const int warm = 200;
  for (; k < calls + warm; ++k) {
    if (k == warm) {
      MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());
      freeBefore = freeDeviceMemory();
    }
    const uint64_t seed = rng.next();
    Rng r(seed);
    bool ok = true;
    uint64_t hash = 0;
    const int kind = static_cast<int>(r.next() % 8);
    if (kind >= 6) {  // alltoallv, host or device counts
      const Splits sp = randomSplits(seed, n, me, r.next() % 2 ? 9 : 4096);
      const bool device = kind == 7;
      GenSpec g{DataType::F32, ValueKind::General, n, seed | 1};
      const uint8_t P = static_cast<uint8_t>(seed >> 8);
      const std::string ctx = detail::concat("soak call ", k, " alltoallv");
      ok = tryCase(ctx, [&] {
        a2av.prepare(stream(), sp, g, me, P);
        a2av.call(cc(), stream(), DataType::F32, device);
        const std::string err = a2av.check(stream(), sp, g, me, P, counters_);
        if (!err.empty()) fail(ctx, err);
      });
    } else {
      Case c;
      c.coll = colls[kind];
      c.dtype = types[r.next() % 4];
      const RedCase reds[] = {{ReduceOp::Sum, false}, {ReduceOp::Max, false}, {ReduceOp::PreMulSum, false}};
      c.red = reds[r.next() % 3];
      c.count = r.size(c.coll == Collective::AllReduce || c.coll == Collective::Broadcast ||
                               c.coll == Collective::Reduce
                           ? maxCount
                           : maxCount / 4);
      c.inPlace = c.coll != Collective::AllToAll && r.next() % 2;
      c.root = static_cast<int>(r.next() % n);
      c.seed = seed;
      ok = runCase(c, send, recv, &hash);
    }
    if (!agree(ok, 0).allOk) {
      ADD_FAILURE() << "stopping the soak at call " << k << ": a rank saw an exception";
      break;
    }
  }
  MESHCOMM_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t freeAfter = freeDeviceMemory();
  const double deltaMiB = (static_cast<double>(freeBefore) - static_cast<double>(freeAfter)) / (1 << 20);
  std::printf(
      "[rank %d] soak: %d calls; cudaMemGetInfo free before %.1f MiB, after %.1f MiB (used +%.2f MiB)\n", me,
      k - warm, freeBefore / 1048576.0, freeAfter / 1048576.0, deltaMiB);
  EXPECT_LE(deltaMiB, 2.0) << "device memory grew during the soak";
  EXPECT_EQ(failures_, 0u);
}

// ---------------------------------------------------------------------------------------------------------
// Bad arguments and zero counts
// ---------------------------------------------------------------------------------------------------------

TEST_F(Collectives, BadArgumentsThrowNamingRankAndOp) {
  const int n = worldSize(), me = rank();
  auto& a = keep<GpuBuffer>(n * 1024 * 8);
  auto& b = keep<GpuBuffer>(n * 1024 * 8);
  auto& counts = keep<GpuBuffer>(4 * n * sizeof(size_t));
  std::vector<size_t> hc(n, 4), hd(n);
  for (int p = 0; p < n; ++p) hd[p] = p * 4;
  cudaStream_t s = stream();
  const DataType badType = static_cast<DataType>(99);
  const ReduceOp badOp = static_cast<ReduceOp>(42);
  const size_t* dc = static_cast<const size_t*>(counts.data());
  struct BadCall {
    const char* what;
    const char* op;  // must appear in the message
    std::function<void()> call;
  };
  void* A = a.data();
  void* B = b.data();
  const std::vector<BadCall> calls = {
      {"allreduce null send", "allreduce",
       [&] { cc().allReduce(nullptr, B, 16, DataType::F32, ReduceOp::Sum, s); }},
      {"allreduce null recv", "allreduce",
       [&] { cc().allReduce(A, nullptr, 16, DataType::F32, ReduceOp::Sum, s); }},
      {"allreduce bad dtype", "allreduce", [&] { cc().allReduce(A, B, 16, badType, ReduceOp::Sum, s); }},
      {"allreduce bad op", "allreduce", [&] { cc().allReduce(A, B, 16, DataType::F32, badOp, s); }},
      {"allreduce premulsum with a host pointer as device scalar", "allreduce",
       [&] {
         static double hostScalar = 1.0;
         cc().allReduce(A, B, 16, DataType::F64, ReduceOpSpec::preMulSumDevice(&hostScalar), s);
       }},
      {"allreduce host memory", "allreduce",
       [&] {
         static float host[16];
         cc().allReduce(host, B, 16, DataType::F32, ReduceOp::Sum, s);
       }},
      {"reduce_scatter bad op", "reduce_scatter",
       [&] { cc().reduceScatter(A, B, 16, DataType::F32, badOp, s); }},
      {"reduce_scatter null recv", "reduce_scatter",
       [&] { cc().reduceScatter(A, nullptr, 16, DataType::F32, ReduceOp::Sum, s); }},
      {"reduce bad dtype", "reduce", [&] { cc().reduce(A, B, 16, badType, ReduceOp::Sum, 0, s); }},
      {"reduce root -1", "reduce", [&] { cc().reduce(A, B, 16, DataType::F32, ReduceOp::Sum, -1, s); }},
      {"reduce root n", "reduce", [&] { cc().reduce(A, B, 16, DataType::F32, ReduceOp::Sum, n, s); }},
      {"reduce null recv on the root", "reduce",
       [&] { cc().reduce(A, nullptr, 16, DataType::F32, ReduceOp::Sum, me, s); }},
      {"allgather null send", "allgather", [&] { cc().allGather(nullptr, B, 16, DataType::F32, s); }},
      {"allgather bad dtype", "allgather", [&] { cc().allGather(A, B, 16, badType, s); }},
      {"broadcast root n", "broadcast", [&] { cc().broadcast(A, B, 16, DataType::F32, n, s); }},
      {"broadcast root -1", "broadcast", [&] { cc().broadcast(A, B, 16, DataType::F32, -1, s); }},
      {"broadcast null recv", "broadcast", [&] { cc().broadcast(A, nullptr, 16, DataType::F32, 0, s); }},
      {"gather root n", "gather", [&] { cc().gather(A, B, 16, DataType::F32, n, s); }},
      {"gather null recv on the root", "gather", [&] { cc().gather(A, nullptr, 16, DataType::F32, me, s); }},
      {"scatter root -1", "scatter", [&] { cc().scatter(A, B, 16, DataType::F32, -1, s); }},
      {"scatter null send on the root", "scatter",
       [&] { cc().scatter(nullptr, B, 16, DataType::F32, me, s); }},
      {"alltoall null recv", "alltoall", [&] { cc().allToAll(A, nullptr, 16, DataType::F32, s); }},
      {"alltoall bad dtype", "alltoall", [&] { cc().allToAll(A, B, 16, badType, s); }},
      {"alltoallv null counts", "alltoallv",
       [&] { cc().allToAllv(A, nullptr, hd.data(), B, hc.data(), hd.data(), DataType::F32, s); }},
      {"alltoallv null send", "alltoallv",
       [&] { cc().allToAllv(nullptr, hc.data(), hd.data(), B, hc.data(), hd.data(), DataType::F32, s); }},
      {"alltoallv bad dtype (device counts)", "alltoallv",
       [&] { cc().allToAllv(A, dc, dc + n, B, dc + 2 * n, dc + 3 * n, badType, s, CountsLocation::Device); }},
      {"send peer n", "send", [&] { cc().send(A, 16, DataType::F32, n, s); }},
      {"send peer -1", "send", [&] { cc().send(A, 16, DataType::F32, -1, s); }},
      {"recv peer n", "recv", [&] { cc().recv(B, 16, DataType::F32, n, s); }},
      {"send null buffer", "send", [&] { cc().send(nullptr, 16, DataType::F32, (me + 1) % n, s); }},
      {"recv bad dtype", "recv", [&] { cc().recv(B, 16, badType, (me + 1) % n, s); }},
      // The CollectiveArgs entry and its two halves (the typed calls above run through them).
      {"launch allgather null send", "allgather",
       [&] { cc().launch(CollectiveArgs::of(Collective::AllGather, nullptr, B, 16, DataType::F32, s)); }},
      {"check reduce root n", "reduce",
       [&] {
         cc().check(CollectiveArgs::of(Collective::Reduce, A, B, 16, DataType::F32, s, ReduceOp::Sum, n));
       }},
      {"check sendrecv args", "sendrecv",
       [&] {
         CollectiveArgs args;
         args.collective = Collective::SendRecv;
         cc().check(args);
       }},
      {"checkP2P recv peer n", "recv",
       [&] {
         cc().checkP2P(P2POp{P2POp::Recv, n, B, 16}, DataType::F32, s);
       }},
  };
  const std::string rankText = detail::concat("rank ", me);
  for (const BadCall& c : calls) {
    try {
      c.call();
      ADD_FAILURE() << c.what << ": no exception";
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(rankText), std::string::npos)
          << c.what << ": message does not name " << rankText << ": " << w;
      EXPECT_NE(w.find(c.op), std::string::npos) << c.what << ": message does not name " << c.op << ": " << w;
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << c.what << ": " << w;
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.what << ": not a meshcomm::Error: " << e.what();
    }
  }
  // A send/recv group with a bad peer: the error comes at the call or at groupEnd; the group must be
  // usable again afterwards.
  try {
    cc().groupStart();
    cc().send(A, 16, DataType::F32, n + 3, s);
    cc().groupEnd();
    ADD_FAILURE() << "group with peer " << n + 3 << ": no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(rankText), std::string::npos) << e.what();
    try {
      cc().groupEnd();  // close the group if the error came before groupEnd
    } catch (const std::exception&) {
    }
  }
  // Nothing was launched: the stream is idle and the Comm still works (one allreduce, checked first and
  // launched later, as the NCCL shim's groups do).
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(s));
  bootstrap().barrier();
  GenSpec g{DataType::F32, ValueKind::General, n, testSeed() | 1};
  const CheckedCall checked =
      cc().check(CollectiveArgs::of(Collective::AllReduce, A, B, 1000, DataType::F32, s, ReduceOp::Sum));
  fillGenerated(s, A, 1000, g, me);
  cc().launch(checked);
  MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(s));
  const Comparison c = compareOutput(B, 1000, DataType::F32, [&](uint64_t i) {
    return reduceExpected(g, {ReduceOp::Sum, false}, i);
  });
  EXPECT_EQ(c.mismatches, 0u) << "allreduce after the rejected calls: " << c.first;
}

// Count 0 is a no-op on every collective: returns at once and touches nothing.
// Registered buffers: the selector routes allreduce calls inside registrations to allreduce_zerocopy (and
// back to the scratch algorithms once deregistered); the zero-copy algorithm forced over the reduction
// matrix (every dtype, op, count, offsets, in place; premulsum falls through to the next rule); ranks whose
// buffers sit at different offsets of their registrations (the kernel learns the peers' offsets).
TEST_F(Collectives, ZeroCopyAllReduceOnRegisteredBuffers) {
  const int n = worldSize(), me = rank();
  cudaStream_t s = stream();
  // Room for the matrix and for the 1.2 MB checks below (the probe's 2 MiB call must lie inside).
  const size_t capacity = std::max<size_t>(
      caseCapacity(Collective::AllReduce, matrixCounts().back(), DataType::F64, 1), 3u << 20);
  auto& send = keep<GuardedBuffer>(capacity);
  auto& recv = keep<GuardedBuffer>(capacity);
  const BufferRegistration regSend = cc().registerBuffer(send.base(), send.totalBytes());
  const BufferRegistration regRecv = cc().registerBuffer(recv.base(), recv.totalBytes());
  ASSERT_TRUE(regSend && regRecv);

  CollectiveArgs probe;
  probe.collective = Collective::AllReduce;
  probe.input = send.at(0);
  probe.output = recv.at(0);
  probe.count = (2u << 20) / 2;  // 2 MiB: in the zero-copy rule's range of the built-in table
  probe.dtype = DataType::BF16;
  if (!selectionOverridden()) {
    EXPECT_EQ(cc().select(probe).algorithm->name(), "allreduce_zerocopy");
  }
  {
    ScopedAlgorithm forced(cc(), Collective::AllReduce, "allreduce_zerocopy");
    runCases(reductionMatrix(Collective::AllReduce, testSeed() + 29, n), send, recv);
  }

  // Per-rank offsets: rank r's input starts 4*r bytes into its registration, its output 4*(n-r)+8 bytes in.
  const uint64_t count = 300001;
  const uint64_t inOff = 4 * static_cast<uint64_t>(me), outOff = 4 * static_cast<uint64_t>(n - me) + 8;
  ASSERT_LE(count * 4 + 64, send.capacity());
  std::vector<float> in(count), out(count);
  for (uint64_t i = 0; i < count; ++i)
    in[i] = static_cast<float>((i * 7 + static_cast<uint64_t>(me) * 13) % 1001) - 500;
  send.poison(s, 0x5a);
  recv.poison(s, 0xa5);
  MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(send.at(inOff), in.data(), count * 4, cudaMemcpyHostToDevice, s));
  {
    ScopedAlgorithm forced(cc(), Collective::AllReduce, "allreduce_zerocopy");
    CollectiveArgs a = probe;
    a.input = send.at(inOff);
    a.output = recv.at(outOff);
    a.count = count;
    a.dtype = DataType::F32;
    if (!selectionOverridden()) EXPECT_EQ(cc().select(a).algorithm->name(), "allreduce_zerocopy");
    cc().allReduce(send.at(inOff), recv.at(outOff), count, DataType::F32, ReduceOp::Sum, s);
  }
  MESHCOMM_CUDA_CHECK(cudaMemcpyAsync(out.data(), recv.at(outOff), count * 4, cudaMemcpyDeviceToHost, s));
  recv.countOutside(s, recv.at(outOff), count * 4, 0xa5, counters_.at(0));
  const auto outside = counters_.collect(s);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    double ref = 0;
    for (int r = 0; r < n; ++r)
      ref += static_cast<double>((i * 7 + static_cast<uint64_t>(r) * 13) % 1001) - 500;
    if (static_cast<double>(out[i]) != ref && ++wrong <= 3)
      ADD_FAILURE() << "[rank " << me << "] element " << i << ": " << out[i] << " != " << ref;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(outside[0], 0u) << "bytes written outside the output";
  EXPECT_NO_THROW(cc().checkError());

  cc().deregisterBuffer(regSend);
  cc().deregisterBuffer(regRecv);
  if (!selectionOverridden()) {
    EXPECT_NE(cc().select(probe).algorithm->name(), "allreduce_zerocopy");
  }
  EXPECT_THROW(cc().deregisterBuffer(regSend), Error);
}

TEST_F(Collectives, ZeroCountIsANoOp) {
  const int n = worldSize(), me = rank();
  auto& a = keep<GuardedBuffer>(64);
  auto& b = keep<GuardedBuffer>(64);
  cudaStream_t s = stream();
  a.poison(s, 0x11);
  b.poison(s, 0x22);
  std::vector<size_t> zeros(n, 0);
  void* A = a.at(0);
  void* B = b.at(0);
  cc().allReduce(A, B, 0, DataType::F32, ReduceOp::Sum, s);
  cc().reduceScatter(A, B, 0, DataType::F32, ReduceOp::Sum, s);
  cc().reduce(A, B, 0, DataType::F32, ReduceOp::Sum, 0, s);
  cc().allGather(A, B, 0, DataType::F32, s);
  cc().broadcast(A, B, 0, DataType::F32, 0, s);
  cc().gather(A, B, 0, DataType::F32, 0, s);
  cc().scatter(A, B, 0, DataType::F32, 0, s);
  cc().allToAll(A, B, 0, DataType::F32, s);
  cc().allToAllv(A, zeros.data(), zeros.data(), B, zeros.data(), zeros.data(), DataType::F32, s);
  cc().groupStart();
  cc().send(A, 0, DataType::F32, (me + 1) % n, s);
  cc().recv(B, 0, DataType::F32, (me + n - 1) % n, s);
  cc().groupEnd();
  a.countOutside(s, A, 0, 0x11, counters_.at(0));
  b.countOutside(s, B, 0, 0x22, counters_.at(1));
  const auto k = counters_.collect(s);
  EXPECT_EQ(k[0], 0u) << "a count-0 call wrote its input";
  EXPECT_EQ(k[1], 0u) << "a count-0 call wrote its output";
  EXPECT_NO_THROW(cc().checkError());
}

}  // namespace
}  // namespace meshcomm::test
