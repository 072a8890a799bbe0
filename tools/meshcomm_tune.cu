// meshcomm-tune: measures every applicable algorithm (and a few launch configurations) per collective and
// message size on this machine and writes a selector table (docs/collectives.md) that MESHCOMM_ALGO_TABLE
// can load. One process per GPU:
//
//   meshcomm-run -n N -- meshcomm-tune --out table.json [--min 1K] [--max 256M] [-d bfloat16] [-r sum]
//                                      [-n 20] [-w 3] [-G] [-o allreduce,allgather,...]
//
// For each collective and size (powers of 2 from --min to --max, nccl-tests message sizes as
// CollectiveArgs::messageBytes), every algorithm of Comm::algorithms().forCollective() whose
// unsupportedReason() is empty runs through Comm::run with its default launch configuration and the
// candidates below; time = warm-up, then -n back-to-back iterations (eager, or one CUDA graph with -G) on
// rotating buffers, host clock to stream completion / n, the median of several such repeats (as
// meshcomm-bench: repeat_timing.hpp), averaged over ranks. Rank 0 picks the fastest per
// size; adjacent sizes with the same winner merge into one rule (world_size = N; the first rule of a
// collective starts at 0 bytes, the last one has no upper bound). Every rank runs the same sequence; a
// candidate that throws (on any rank) is dropped. Out-of-place only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "meshcomm/comm.hpp"
#include "meshcomm/core.hpp"
#include "byte_size.hpp"
#include "repeat_timing.hpp"
#include "tool_rank.hpp"

using namespace meshcomm;

namespace {

const LaunchConfig kConfigs[] = {{0, 0}, {8, 512}, {16, 512}, {32, 512}, {64, 512}, {32, 1024}, {16, 256}};

struct Options {
  uint64_t minBytes = 1 << 10, maxBytes = 256ull << 20;
  DataType dtype = DataType::BF16;
  ReduceOp redop = ReduceOp::Sum;
  int iters = 20, warmup = 3;
  bool graph = false;
  std::vector<Collective> colls = {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                                   Collective::AllToAll,  Collective::Broadcast, Collective::Reduce,
                                   Collective::Gather,    Collective::Scatter,   Collective::AllToAllv,
                                   Collective::SendRecv};
  std::string out;
};

uint64_t parseBytes(const std::string& s) {
  return tools::parseByteSize("meshcomm-tune", s);
}

void usage() {
  std::printf(
      "usage: meshcomm-run -n N -- meshcomm-tune --out FILE [--min 1K] [--max 256M] [-d bfloat16] [-r sum]\n"
      "                                          [-n 20] [-w 3] [-G] [-o allreduce,allgather,...]\n"
      "Writes a selector table (JSON, see docs/collectives.md); load it with MESHCOMM_ALGO_TABLE=FILE.\n");
}

Options parseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--min") {
      o.minBytes = parseBytes(value());
    } else if (a == "--max") {
      o.maxBytes = parseBytes(value());
    } else if (a == "-d") {
      const std::string v = value();
      bool found = false;
      for (int k = 0; k < kNumDataTypes; ++k)
        if (v == dataTypeName(static_cast<DataType>(k))) o.dtype = static_cast<DataType>(k), found = true;
      if (!found) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: unknown type '", v, "'");
    } else if (a == "-r") {
      const std::string v = value();
      bool found = false;
      for (int k = 0; k <= static_cast<int>(ReduceOp::Avg); ++k)
        if (v == reduceOpName(static_cast<ReduceOp>(k))) o.redop = static_cast<ReduceOp>(k), found = true;
      if (!found) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: unknown reduction '", v, "'");
    } else if (a == "-n") {
      o.iters = std::atoi(value().c_str());
    } else if (a == "-w") {
      o.warmup = std::atoi(value().c_str());
    } else if (a == "-G") {
      o.graph = true;
    } else if (a == "-o") {
      o.colls.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) {
        bool found = false;
        for (int k = 0; k < kNumCollectives; ++k)
          if (item == collectiveName(static_cast<Collective>(k)) &&
              static_cast<Collective>(k) != Collective::Barrier)
            o.colls.push_back(static_cast<Collective>(k)), found = true;
        if (!found) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: unknown collective '", item, "'");
      }
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      usage();
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: unknown argument '", a, "'");
    }
  }
  if (o.out.empty()) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: --out FILE is required");
  if (o.iters < 1 || o.warmup < 0 || o.minBytes > o.maxBytes)
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-tune: bad -n/-w/--min/--max");
  return o;
}

class Tuner {
 public:
  Tuner(Comm& comm, const Options& o) : comm_(comm), o_(o), n_(comm.size()), rank_(comm.rank()) {
    es_ = dataTypeSize(o_.dtype);
    MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    poolBytes_ = std::max<uint64_t>(o_.maxBytes, 1 << 20) * 2;
    MESHCOMM_CUDA_CHECK(cudaMalloc(&send_, poolBytes_));
    MESHCOMM_CUDA_CHECK(cudaMalloc(&recv_, poolBytes_));
    MESHCOMM_CUDA_CHECK(cudaMemset(send_, 0, poolBytes_));
  }
  ~Tuner() {
    cudaStreamSynchronize(stream_);
    cudaFree(send_);
    cudaFree(recv_);
    cudaStreamDestroy(stream_);
  }

  std::vector<SelectorRule> run() {
    std::vector<SelectorRule> rules;
    for (Collective c : o_.colls) tuneCollective(c, rules);
    return rules;
  }

 private:
  // Arguments of one out-of-place call of message size S at rotation slot k.
  CollectiveArgs args(Collective c, uint64_t S, int k) {
    const uint64_t slot = (S + 255) / 256 * 256;
    const uint64_t off = (k % std::max<uint64_t>(1, poolBytes_ / slot)) * slot;
    CollectiveArgs a;
    a.collective = c;
    a.input = static_cast<char*>(send_) + off;
    a.output = static_cast<char*>(recv_) + off;
    a.dtype = o_.dtype;
    a.op = ReduceOpSpec(o_.redop);
    a.root = 0;
    a.stream = stream_;
    const uint64_t elems = S / es_;
    switch (c) {
      case Collective::AllGather:
      case Collective::Gather:
      case Collective::ReduceScatter:
      case Collective::Scatter:
      case Collective::AllToAll:
        a.count = elems / n_;
        break;
      case Collective::AllToAllv:
        counts_.assign(n_, elems / n_);
        displs_.resize(n_);
        for (int p = 0; p < n_; ++p) displs_[p] = p * (elems / n_);
        a.sendCounts = a.recvCounts = counts_.data();
        a.sendDispls = a.recvDispls = displs_.data();
        break;
      case Collective::SendRecv:
        p2p_[0] = P2POp{P2POp::Send, (rank_ + 1) % n_, const_cast<void*>(a.input), elems};
        p2p_[1] = P2POp{P2POp::Recv, (rank_ + n_ - 1) % n_, a.output, elems};
        a.p2pOps = p2p_;
        a.numP2POps = 2;
        a.count = elems;
        break;
      default:
        a.count = elems;
    }
    return a;
  }

  // Average time over ranks in us, or NaN when the candidate failed on any rank.
  double measure(Collective c, uint64_t S, const std::string& algo, const LaunchConfig& cfg) {
    bool ok = true;
    double us = 0;
    cudaGraphExec_t exec = nullptr;
    try {
      for (int k = 0; k < o_.warmup + 1; ++k) comm_.run(args(c, S, k), algo, cfg);
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (o_.graph) {
        cudaGraph_t g = nullptr;
        MESHCOMM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        try {
          for (int k = 0; k < o_.iters; ++k) {
            CollectiveArgs a = args(c, S, k);
            comm_.run(a, algo, cfg);
          }
        } catch (...) {
          cudaStreamEndCapture(stream_, &g);
          if (g) cudaGraphDestroy(g);
          throw;
        }
        MESHCOMM_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
        MESHCOMM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        cudaGraphDestroy(g);
        MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      }
    } catch (const std::exception& e) {
      ok = false;
      if (rank_ == 0)
        std::printf("#   %s [%d,%d] %llu B: dropped (%s)\n", algo.c_str(), cfg.nBlocks, cfg.nThreadsPerBlock,
                    static_cast<unsigned long long>(S), e.what());
    }
    if (!agreeAll(ok)) {
      if (exec) cudaGraphExecDestroy(exec);
      return NAN;
    }
    // The median of timed repeats (repeat_timing.hpp, as meshcomm-bench): one timed launch let a one-off
    // stall pick a table's winner. A rank whose launch fails skips its remaining launches but still joins
    // every repeat's barrier, so the ranks' bootstrap operations stay in step.
    std::optional<std::string> failure;
    us = tools::medianTimedUs(
        tools::timedRepeats(S, o_.graph), o_.iters, [&] { comm_.communicator().bootstrap().barrier(); },
        [&] {
          if (failure) return;
          try {
            if (o_.graph)
              MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
            else
              for (int k = 0; k < o_.iters; ++k) comm_.run(args(c, S, k), algo, cfg);
            MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
          } catch (const std::exception& e) {
            failure = e.what();
          }
        });
    if (!failure) {
      try {
        comm_.checkError();
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    if (failure) {
      ok = false;
      std::fprintf(stderr, "[rank %d] meshcomm-tune: %s failed while timed: %s\n", rank_, algo.c_str(),
                   failure->c_str());
    }
    if (exec) cudaGraphExecDestroy(exec);
    std::vector<double> all(n_);
    all[rank_] = ok ? us : NAN;
    comm_.communicator().bootstrap().allGather(all.data(), sizeof(double));
    double s = 0;
    for (double v : all) s += v;
    return s / n_;  // NaN if any rank failed
  }

  bool agreeAll(bool ok) {
    std::vector<int32_t> all(n_);
    all[rank_] = ok ? 1 : 0;
    comm_.communicator().bootstrap().allGather(all.data(), sizeof(int32_t));
    return std::all_of(all.begin(), all.end(), [](int32_t v) { return v != 0; });
  }

  void tuneCollective(Collective c, std::vector<SelectorRule>& rules) {
    const auto algos = comm_.algorithms().forCollective(c);
    const CommTopology& topo = comm_.resources().topology();
    struct Winner {
      uint64_t size;
      std::string algo;
      LaunchConfig cfg;
      double us;
    };
    std::vector<Winner> winners;
    // Total time of each candidate over all sizes (for collectives whose size is rank-local: one rule).
    std::map<std::tuple<std::string, int, int>, std::pair<double, int>> totals;
    int sizesMeasured = 0;
    for (uint64_t S = o_.minBytes; S <= o_.maxBytes; S *= 2) {
      const uint64_t unit = es_ * n_;
      const uint64_t size = S / unit * unit;
      if (size == 0) continue;
      Winner best{size, "", {}, INFINITY};
      for (const auto& alg : algos) {
        const CollectiveArgs a = args(c, size, 0);
        if (!alg->unsupportedReason(a, topo).empty()) continue;
        for (const LaunchConfig& cfg : kConfigs) {
          const double us = measure(c, size, alg->name(), cfg);
          if (rank_ == 0)
            std::printf("#   %-14s %10llu B  %-28s blocks %3d threads %4d  %10.2f us\n", collectiveName(c),
                        static_cast<unsigned long long>(size), alg->name().c_str(), cfg.nBlocks,
                        cfg.nThreadsPerBlock, us);
          if (!std::isnan(us) && us < best.us) best = Winner{size, alg->name(), cfg, us};
          if (!std::isnan(us)) {
            auto& t = totals[{alg->name(), cfg.nBlocks, cfg.nThreadsPerBlock}];
            t.first += us;
            t.second += 1;
          }
        }
      }
      ++sizesMeasured;
      if (!best.algo.empty()) {
        winners.push_back(best);
        if (rank_ == 0)
          std::printf("%-14s %10llu B: %s [%d,%d] %.2f us\n", collectiveName(c),
                      static_cast<unsigned long long>(size), best.algo.c_str(), best.cfg.nBlocks,
                      best.cfg.nThreadsPerBlock, best.us);
      }
      std::fflush(stdout);
    }
    if (sizeIsRankLocal(c)) {  // one unbounded rule: the candidate with the least total time at every size
      const std::pair<const std::tuple<std::string, int, int>, std::pair<double, int>>* best = nullptr;
      for (const auto& entry : totals)
        if (entry.second.second == sizesMeasured && (!best || entry.second.first < best->second.first))
          best = &entry;
      if (best != nullptr) {
        SelectorRule r;
        r.collective = c;
        r.worldSize = n_;
        r.algorithm = std::get<0>(best->first);
        r.config = LaunchConfig{std::get<1>(best->first), std::get<2>(best->first)};
        rules.push_back(r);
      }
      return;
    }
    // Merge adjacent sizes with the same winner.
    for (size_t i = 0; i < winners.size();) {
      size_t j = i;
      while (j + 1 < winners.size() && winners[j + 1].algo == winners[i].algo &&
             winners[j + 1].cfg.nBlocks == winners[i].cfg.nBlocks &&
             winners[j + 1].cfg.nThreadsPerBlock == winners[i].cfg.nThreadsPerBlock)
        ++j;
      SelectorRule r;
      r.collective = c;
      r.minBytes = i == 0 ? 0 : winners[i - 1].size + 1;
      r.maxBytes = j + 1 == winners.size() ? std::numeric_limits<size_t>::max() : winners[j].size;
      r.worldSize = n_;
      r.algorithm = winners[i].algo;
      r.config = winners[i].cfg;
      rules.push_back(r);
      i = j + 1;
    }
  }

  Comm& comm_;
  Options o_;
  int n_, rank_;
  size_t es_;
  cudaStream_t stream_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  uint64_t poolBytes_ = 0;
  std::vector<size_t> counts_, displs_;
  P2POp p2p_[2] = {};
};

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  try {
    opts = parseArgs(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  int exitCode = 0;
  const std::optional<RankEnv> rankEnv = tools::prepareGpuToolRank("meshcomm-tune", argv[0], 2, exitCode);
  if (!rankEnv) return exitCode;
  const RankEnv& env = *rankEnv;
  try {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(env.localRank));
    auto bootstrap = TcpBootstrap::fromEnvironment();
    CommConfig cfg;
    cfg.cudaDevice = env.localRank;
    Comm comm(bootstrap, cfg);
    std::vector<SelectorRule> rules;
    {
      Tuner tuner(comm, opts);
      rules = tuner.run();
    }
    if (comm.rank() == 0) {
      const std::string json = Selector(rules).toJson();
      std::ofstream f(opts.out);
      if (!f) MESHCOMM_THROW(ErrorCode::SystemError, "meshcomm-tune: cannot write ", opts.out);
      f << json << "\n";
      std::printf("meshcomm-tune: %zu rules (type %s, %d ranks) written to %s; use MESHCOMM_ALGO_TABLE=%s\n",
                  rules.size(), dataTypeName(opts.dtype), comm.size(), opts.out.c_str(), opts.out.c_str());
    }
    bootstrap->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] meshcomm-tune: %s\n", env.rank, e.what());
    return 1;
  }
  return 0;
}
