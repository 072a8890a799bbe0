// meshcomm-bench: collective benchmark with nccl-tests' columns and definitions, optionally next to NCCL on
// the same buffers and stream. One process per GPU:
//
//   meshcomm-run -n N -- meshcomm-bench [-o allreduce|allgather|reduce_scatter|alltoall|broadcast|reduce|
//        gather|scatter|alltoallv|sendrecv|all|OP,OP,...] [-b 8] [-e 1G] [-f 2] [-d bfloat16] [-r sum] [-n
//        20]
//        [-w 5] [-G] [--graph-max 16M] [--graph-launches 1] [-c 1] [--compare nccl] [--json FILE]
//        [--algo NAME] [--register] [--as-group] [--host-cost CALLS] [-v]
//
// Definitions (nccl-tests, shared/reference/perf_anchors.md sections 7-8):
// * size S (bytes, the "size" column): allreduce/broadcast/reduce/sendrecv: the buffer of one rank;
//   allgather/gather: the whole output (n chunks); reduce_scatter/scatter: the whole input; alltoall: one
//   rank's send buffer (n chunks); alltoallv: the largest bytes any rank sends or receives. Sizes are rounded
//   down to whole elements (and whole chunks of n). count = S / sizeof(type).
// * algbw = S / time (GB/s = 1e9 B/s); busbw = algbw * factor: allreduce 2(n-1)/n; allgather,
//   reduce_scatter, alltoall, alltoallv, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1.
// * time: per size, warm-up iterations (-w, untimed), a bootstrap barrier, then -n iterations launched back
//   to back without host synchronisation (eager), or the same -n iterations captured once into a CUDA graph
//   whose one untimed launch precedes the timed launches (-G, or sizes <= --graph-max; --graph-launches L:
//   that graph launched L times back to back, as nccl-tests -G L, so the ranks' skew leaving the barrier is
//   spread over L times the calls); host steady clock from the first launch to the stream's completion,
//   divided by the iterations (-n, times L with a graph); this is repeated 9 times (graph timing
//   or sizes <= 16 MiB; 5 times for larger eager rows), each after a host barrier, and the median kept: a
//   host stall of ~1 ms (seen on the 4x H200 host in both libraries' timings, up to 3 consecutive repeats of
//   a ~0.1 ms timing; -v prints them) then cannot decide a row. The printed time is the AVERAGE over ranks of
//   that median (nccl-tests -a 1).
// * buffers rotate: iteration k uses offset (k mod slots) * slot inside pools as large as the largest size,
//   so small sizes do not run out of cache (as nccl-tests).
// * #wrong (-c 1): after timing, fresh inputs, one call, wrong elements summed over ranks (exact values
//   for integers, min/max/prod; sum-like float results within (n+2)*eps*sum|x|). Not part of the timing.
//   In-place alltoall(v) and sendrecv are not defined: their in-place columns print N/A.
// * --compare nccl: NCCL (dlopen libnccl.so.2, or MESHCOMM_BENCH_NCCL_LIB) on the same buffers, stream and
//   timing method, out-of-place; NCCL_NVLS_ENABLE=0 unless set; columns nccl_us and ratio = nccl_us /
//   meshcomm out-of-place us (> 1: meshcomm faster). alltoall(v), gather, scatter and sendrecv use grouped
//   ncclSend/ncclRecv (as nccl-tests does).
// * --host-cost CALLS: after an op's rows, host time per eager call at its smallest size (CALLS calls
//   enqueued without synchronisation, median of 9 repeats, average over ranks), next to a bare
//   cudaLaunchKernel of an empty kernel on the same stream: what the library adds to a launch.
// Exit status: 0, 77 with fewer than 2 GPUs or ranks, 1 on errors, 2 on bad arguments.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "meshcomm/comm.hpp"
#include "meshcomm/core.hpp"
#include "byte_size.hpp"
#include "repeat_timing.hpp"
#include "tool_rank.hpp"
#include "nccl_loader.hpp"
#include "run_record.hpp"

using namespace meshcomm;
using meshcomm::tools::NcclApi;
namespace nccl = meshcomm::tools::nccl;

namespace {

enum class Op {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Broadcast,
  Reduce,
  Gather,
  Scatter,
  AllToAllv,
  SendRecv
};
const Op kAllOps[] = {Op::AllReduce, Op::AllGather, Op::ReduceScatter, Op::AllToAll,  Op::Broadcast,
                      Op::Reduce,    Op::Gather,    Op::Scatter,       Op::AllToAllv, Op::SendRecv};
const char* opName(Op op) {
  switch (op) {
    case Op::AllReduce:
      return "allreduce";
    case Op::AllGather:
      return "allgather";
    case Op::ReduceScatter:
      return "reduce_scatter";
    case Op::AllToAll:
      return "alltoall";
    case Op::Broadcast:
      return "broadcast";
    case Op::Reduce:
      return "reduce";
    case Op::Gather:
      return "gather";
    case Op::Scatter:
      return "scatter";
    case Op::AllToAllv:
      return "alltoallv";
    case Op::SendRecv:
      return "sendrecv";
  }
  return "?";
}
Collective collectiveOf(Op op) {
  switch (op) {
    case Op::AllReduce:
      return Collective::AllReduce;
    case Op::AllGather:
      return Collective::AllGather;
    case Op::ReduceScatter:
      return Collective::ReduceScatter;
    case Op::AllToAll:
      return Collective::AllToAll;
    case Op::Broadcast:
      return Collective::Broadcast;
    case Op::Reduce:
      return Collective::Reduce;
    case Op::Gather:
      return Collective::Gather;
    case Op::Scatter:
      return Collective::Scatter;
    case Op::AllToAllv:
      return Collective::AllToAllv;
    case Op::SendRecv:
      return Collective::SendRecv;
  }
  return Collective::AllReduce;
}
bool isReducing(Op op) {
  return op == Op::AllReduce || op == Op::ReduceScatter || op == Op::Reduce;
}
bool isRooted(Op op) {
  return op == Op::Broadcast || op == Op::Reduce || op == Op::Gather || op == Op::Scatter;
}
bool hasInPlace(Op op) {
  return op != Op::AllToAll && op != Op::AllToAllv && op != Op::SendRecv;
}
// Ops nccl-tests posts as one group of sends and receives (NCCL has no collective for them but sendrecv's
// own group); --as-group posts meshcomm's the same way.
bool postedAsGroup(Op op) {
  return op == Op::AllToAll || op == Op::AllToAllv || op == Op::Gather || op == Op::Scatter ||
         op == Op::SendRecv;
}
double busFactor(Op op, int n) {
  switch (op) {
    case Op::AllReduce:
      return 2.0 * (n - 1) / n;
    case Op::Broadcast:
    case Op::Reduce:
    case Op::SendRecv:
      return 1.0;
    default:
      return static_cast<double>(n - 1) / n;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------------------

struct Options {
  std::string command;  // the command line, for the JSON record
  std::vector<Op> ops = {Op::AllReduce};
  uint64_t minBytes = 8, maxBytes = 1ull << 30;
  double factor = 2;
  DataType dtype = DataType::BF16;
  ReduceOp redop = ReduceOp::Sum;
  int iters = 20, warmup = 5;
  bool graph = false;
  uint64_t graphMax = 0;  // graph timing for sizes <= graphMax (0: -G decides for every size)
  int graphLaunches = 1;  // --graph-launches: launches of the graph per timed repeat
  int check = 1;
  bool compareNccl = false;
  std::string json, algo;
  int root = 0;
  bool registerBuffers = false;  // --register: Comm::registerBuffer on the buffer pools (zero-copy paths)
  bool asGroup = false;          // --as-group: alltoall(v), gather, scatter as nccl-tests' group of send/recv
  bool verbose = false;          // -v: every rank's timed repeats of every timing (rank 0 prints)
  int hostCostCalls = 0;         // --host-cost CALLS: host time per eager call at the smallest size (0: off)
};

uint64_t parseBytes(const std::string& s) {
  return tools::parseByteSize("meshcomm-bench", s);
}

void usage() {
  std::printf(
      "usage: meshcomm-run -n N -- meshcomm-bench [options]\n"
      "  -o OP            allreduce|allgather|reduce_scatter|alltoall|broadcast|reduce|gather|scatter|\n"
      "                   alltoallv|sendrecv|all, or a comma-separated list of them, run in the order given\n"
      "                   (default allreduce; all = every op in the order above)\n"
      "  -b SIZE, -e SIZE smallest / largest size (default 8 / 1G; K, M, G suffixes)\n"
      "  -f FACTOR        size multiplier between rows (default 2)\n"
      "  -d TYPE          float|half|bfloat16|double|int8|uint8|int32|uint32|int64|uint64|f8e4m3|f8e5m2\n"
      "                   (nccl-tests names; default bfloat16)\n"
      "  -r OP            sum|prod|min|max|avg|premulsum (default sum; premulsum uses the scalar 0.5, 2 for\n"
      "                   integers)\n"
      "  -n ITERS         timed iterations per size (default 20, at least 20 recommended)\n"
      "  -w ITERS         warm-up iterations per size (default 5)\n"
      "  -G               CUDA-graph timing for every size (capture -n iterations once, replay)\n"
      "  --graph-max SIZE graph timing up to SIZE, eager above (implies graph timing for small sizes)\n"
      "  --graph-launches L  launch the graph L times back to back per timed repeat (nccl-tests -G L;\n"
      "                   default 1): the ranks' skew leaving the barrier weighs 1/L as much per call\n"
      "  -c 0|1           check results (#wrong columns; default 1)\n"
      "  --root R         root of broadcast/reduce/gather/scatter (default 0)\n"
      "  --compare nccl   also time NCCL (out-of-place) on the same buffers; adds nccl_us and ratio =\n"
      "                   nccl_us / meshcomm_us (> 1: meshcomm faster). Loads libnccl.so.2 at run time;\n"
      "                   MESHCOMM_BENCH_NCCL_LIB=/path/libnccl.so.2 overrides the library (a variable of\n"
      "                   this tool only). NCCL_NVLS_ENABLE=0 is set unless already set.\n"
      "  --json FILE      write one JSON object per (op, size) with every column (rank 0)\n"
      "  --algo NAME      run NAME (Comm::run) instead of the selector's choice\n"
      "  --register       register the send/recv pools with Comm::registerBuffer (zero-copy algorithms such\n"
      "                   as allreduce_zerocopy run on them; NCCL still runs unregistered)\n"
      "  --as-group       post alltoall, alltoallv, gather and scatter as nccl-tests does, one group of\n"
      "                   Comm::send/recv per call, instead of the collective (algo: the group's sendrecv\n"
      "                   algorithm); other ops are unchanged. Not with --algo\n"
      "  --host-cost CALLS  after each op's rows, the host time per eager call at the smallest size: CALLS "
      "calls\n"
      "                   enqueued back to back (no synchronisation inside; keep CALLS under the launch\n"
      "                   queue's depth, e.g. 500), median of 9 repeats, average over ranks; next to a bare\n"
      "                   cudaLaunchKernel of an empty kernel on the same stream (and NCCL's call with\n"
      "                   --compare nccl)\n"
      "  -v               also print every rank's timed repeats (us per iteration) of every timing, in the\n"
      "                   order taken (meshcomm out-of-place, in-place, NCCL)\n"
      "Time = average over ranks (nccl-tests -a 1) of host time from the first launch to stream completion "
      "/\n"
      "iterations. busbw factors: allreduce 2(n-1)/n; allgather, reduce_scatter, alltoall(v), gather,\n"
      "scatter (n-1)/n; broadcast, reduce, sendrecv 1.\n");
}

DataType parseDtype(const std::string& s) {
  const std::pair<const char*, DataType> names[] = {
      {"float", DataType::F32},       {"f32", DataType::F32},       {"half", DataType::F16},
      {"f16", DataType::F16},         {"bfloat16", DataType::BF16}, {"bf16", DataType::BF16},
      {"double", DataType::F64},      {"f64", DataType::F64},       {"int8", DataType::I8},
      {"uint8", DataType::U8},        {"int32", DataType::I32},     {"uint32", DataType::U32},
      {"int64", DataType::I64},       {"uint64", DataType::U64},    {"f8e4m3", DataType::F8E4M3},
      {"fp8_e4m3", DataType::F8E4M3}, {"f8e5m2", DataType::F8E5M2}, {"fp8_e5m2", DataType::F8E5M2}};
  for (auto& [n, t] : names)
    if (s == n) return t;
  for (int k = 0; k < kNumDataTypes; ++k)
    if (s == dataTypeName(static_cast<DataType>(k))) return static_cast<DataType>(k);
  MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: unknown type '", s, "'");
}

Options parseArgs(int argc, char** argv) {
  Options o;
  bool graphMaxSet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "-o") {
      const std::string v = value();
      o.ops.clear();
      std::stringstream list(v);
      for (std::string name; std::getline(list, name, ',');) {
        if (name == "all") {
          o.ops.insert(o.ops.end(), std::begin(kAllOps), std::end(kAllOps));
          continue;
        }
        const size_t before = o.ops.size();
        for (Op op : kAllOps)
          if (name == opName(op) || (name == "reducescatter" && op == Op::ReduceScatter)) o.ops.push_back(op);
        if (o.ops.size() == before)
          MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: unknown op '", name, "' in -o ", v);
      }
    } else if (a == "-b") {
      o.minBytes = parseBytes(value());
    } else if (a == "-e") {
      o.maxBytes = parseBytes(value());
    } else if (a == "-f") {
      o.factor = std::atof(value().c_str());
    } else if (a == "-d") {
      o.dtype = parseDtype(value());
    } else if (a == "-r") {
      const std::string v = value();
      bool found = false;
      for (int k = 0; k <= static_cast<int>(ReduceOp::PreMulSum); ++k)
        if (v == reduceOpName(static_cast<ReduceOp>(k))) {
          o.redop = static_cast<ReduceOp>(k);
          found = true;
        }
      if (!found) MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: unknown reduction '", v, "'");
    } else if (a == "-n") {
      o.iters = std::atoi(value().c_str());
    } else if (a == "-w") {
      o.warmup = std::atoi(value().c_str());
    } else if (a == "-G") {
      o.graph = true;
    } else if (a == "--graph-max") {
      o.graphMax = parseBytes(value());
      graphMaxSet = true;
    } else if (a == "--graph-launches") {
      o.graphLaunches = std::atoi(value().c_str());
    } else if (a == "-c") {
      o.check = std::atoi(value().c_str());
    } else if (a == "--root") {
      o.root = std::atoi(value().c_str());
    } else if (a == "--compare") {
      const std::string v = value();
      if (v != "nccl") MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: --compare takes 'nccl'");
      o.compareNccl = true;
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--algo") {
      o.algo = value();
    } else if (a == "--register") {
      o.registerBuffers = true;
    } else if (a == "--as-group") {
      o.asGroup = true;
    } else if (a == "--host-cost") {
      o.hostCostCalls = std::atoi(value().c_str());
      if (o.hostCostCalls < 1) MESHCOMM_THROW(ErrorCode::InvalidUsage, "--host-cost CALLS must be >= 1");
    } else if (a == "-v") {
      o.verbose = true;
    } else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      usage();
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: unknown argument '", a, "'");
    }
  }
  if (o.iters < 1 || o.warmup < 0) MESHCOMM_THROW(ErrorCode::InvalidUsage, "-n must be >= 1, -w >= 0");
  if (o.graphLaunches < 1) MESHCOMM_THROW(ErrorCode::InvalidUsage, "--graph-launches must be >= 1");
  if (o.asGroup && !o.algo.empty())
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "--as-group and --algo exclude each other");
  if (!(o.factor > 1)) MESHCOMM_THROW(ErrorCode::InvalidUsage, "-f must be > 1");
  if (o.minBytes > o.maxBytes) MESHCOMM_THROW(ErrorCode::InvalidUsage, "-b must not exceed -e");
  if (o.graph && !graphMaxSet) o.graphMax = ~0ull;
  return o;
}

// ---------------------------------------------------------------------------------------------------------
// Check data: small exact values per (rank, element), expected results computed on the device
// ---------------------------------------------------------------------------------------------------------

__device__ float loadAsFloat(const void* p, uint64_t i, DataType t) {
  switch (t) {
    case DataType::F32:
      return static_cast<const float*>(p)[i];
    case DataType::F16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case DataType::BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DataType::F64:
      return static_cast<float>(static_cast<const double*>(p)[i]);
    case DataType::I8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::U8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::I32:
      return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DataType::U32:
      return static_cast<float>(static_cast<const uint32_t*>(p)[i]);
    case DataType::I64:
      return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case DataType::U64:
      return static_cast<float>(static_cast<const uint64_t*>(p)[i]);
    case DataType::F8E4M3:
      return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(p)[i]);
    case DataType::F8E5M2:
      return static_cast<float>(static_cast<const __nv_fp8_e5m2*>(p)[i]);
  }
  return NAN;
}

__device__ void storeFromFloat(void* p, uint64_t i, DataType t, float v) {
  switch (t) {
    case DataType::F32:
      static_cast<float*>(p)[i] = v;
      break;
    case DataType::F16:
      static_cast<__half*>(p)[i] = __float2half(v);
      break;
    case DataType::BF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
      break;
    case DataType::F64:
      static_cast<double*>(p)[i] = v;
      break;
    case DataType::I8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DataType::U8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::I32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::U32:
      static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
      break;
    case DataType::I64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DataType::U64:
      static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
      break;
    case DataType::F8E4M3:
      static_cast<__nv_fp8_e4m3*>(p)[i] = __nv_fp8_e4m3(v);
      break;
    case DataType::F8E5M2:
      static_cast<__nv_fp8_e5m2*>(p)[i] = __nv_fp8_e5m2(v);
      break;
  }
}

// Element i of rank r's input (exact in every type; no overflow of any reduction over <= 8 ranks).
__host__ __device__ float checkValue(ReduceOp op, int n, int r, uint64_t i, bool reducing) {
  if (!reducing) return static_cast<float>((r * 3 + i) % 8 + 1);
  switch (op) {
    case ReduceOp::Prod:
      return (r < 6 && (r + i) % 3 == 0) ? 2.f : 1.f;
    case ReduceOp::Avg:
      return static_cast<float>(n);
    default:
      return static_cast<float>((r + i) % 4 + 1);
  }
}

bool isFloatType(DataType t) {
  return t == DataType::F32 || t == DataType::F16 || t == DataType::BF16 || t == DataType::F64 ||
         t == DataType::F8E4M3 || t == DataType::F8E5M2;
}
double unitRoundoff(DataType t) {
  switch (t) {
    case DataType::F16:
      return 1.0 / 2048;
    case DataType::BF16:
      return 1.0 / 256;
    case DataType::F8E4M3:
      return 1.0 / 16;
    case DataType::F8E5M2:
      return 1.0 / 8;
    default:
      return 1.0 / (1 << 24);
  }
}
double preMulScalar(DataType t) {
  return isFloatType(t) ? 0.5 : 2.0;
}

// The floor of an eager call's host time: one launch of a kernel that does nothing.
__global__ void emptyKernel() {}

__global__ void fillCheckKernel(void* dst, uint64_t count, DataType t, ReduceOp op, int n, int r,
                                bool reducing, uint64_t first) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    storeFromFloat(dst, i, t, checkValue(op, n, r, first + i, reducing));
}

// Output element j: reducing -> reduction over ranks of element (first + j); else the value of rank
// src(j) = j / perSrc (srcFixed >= 0: always that rank) at index srcFirst + j % perSrc.
struct CheckSpec {
  DataType t;
  ReduceOp op;
  int n;
  bool reducing;
  uint64_t first;
  int srcFixed;
  uint64_t perSrc, srcFirst;
  float scalar;
  float tolFactor;  // (n+2)*u for sum-like float ops, 0 = exact
};

__global__ void countWrongKernel(const void* out, uint64_t count, CheckSpec c, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < count;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    float exp, absSum = 0;
    if (c.reducing) {
      exp = 0;
      for (int r = 0; r < c.n; ++r) {
        const float x = checkValue(c.op, c.n, r, c.first + j, true);
        switch (c.op) {
          case ReduceOp::Prod:
            exp = r == 0 ? x : exp * x;
            break;
          case ReduceOp::Min:
            exp = r == 0 ? x : fminf(exp, x);
            break;
          case ReduceOp::Max:
            exp = r == 0 ? x : fmaxf(exp, x);
            break;
          case ReduceOp::PreMulSum:
            exp += c.scalar * x;
            absSum += fabsf(c.scalar * x);
            break;
          default:
            exp += x;
            absSum += fabsf(x);
        }
      }
      if (c.op == ReduceOp::Avg) {
        exp /= c.n;
        absSum /= c.n;
      }
    } else {
      const int src = c.srcFixed >= 0 ? c.srcFixed : static_cast<int>(j / c.perSrc);
      exp = checkValue(c.op, c.n, src, c.srcFirst + j % c.perSrc, false);
    }
    const float got = loadAsFloat(out, j, c.t);
    bad += !(fabsf(got - exp) <= c.tolFactor * absSum);
  }
  if (bad != 0) atomicAdd(wrong, bad);
}

int gridFor(uint64_t n) {
  return static_cast<int>(std::min<uint64_t>(std::max<uint64_t>((n + 255) / 256, 1), 1024));
}

// ---------------------------------------------------------------------------------------------------------
// NCCL side
// ---------------------------------------------------------------------------------------------------------

std::optional<nccl::DataType> ncclType(DataType t, int version) {
  switch (t) {
    case DataType::F32:
      return nccl::Float32;
    case DataType::F16:
      return nccl::Float16;
    case DataType::BF16:
      return nccl::Bfloat16;
    case DataType::F64:
      return nccl::Float64;
    case DataType::I8:
      return nccl::Int8;
    case DataType::U8:
      return nccl::Uint8;
    case DataType::I32:
      return nccl::Int32;
    case DataType::U32:
      return nccl::Uint32;
    case DataType::I64:
      return nccl::Int64;
    case DataType::U64:
      return nccl::Uint64;
    case DataType::F8E4M3:
      if (version >= 22400) return nccl::Float8e4m3;
      return std::nullopt;
    case DataType::F8E5M2:
      if (version >= 22400) return nccl::Float8e5m2;
      return std::nullopt;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------------
// The benchmark
// ---------------------------------------------------------------------------------------------------------

// Host time per eager call of one op at one size (--host-cost), us, average over ranks.
struct HostCost {
  Op op;
  uint64_t size = 0;
  int calls = 0;
  double meshcommUs = std::nan(""), ncclUs = std::nan(""), launchUs = std::nan("");
};

struct Row {
  Op op;
  uint64_t size = 0, count = 0;
  int root = -1;
  bool graph = false;
  double oopUs = NAN, ipUs = NAN, ncclUs = NAN;
  long long oopWrong = -1, ipWrong = -1;  // -1: not checked / N/A
  std::string algo;
};

class Bench {
 public:
  Bench(Comm& comm, const Options& o) : comm_(comm), o_(o), n_(comm.size()), rank_(comm.rank()) {
    es_ = dataTypeSize(o_.dtype);
    MESHCOMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MESHCOMM_CUDA_CHECK(cudaMalloc(&wrong_, sizeof(unsigned long long)));
    if (o_.redop == ReduceOp::PreMulSum) hostScalar_ = preMulScalar(o_.dtype);
  }
  ~Bench() {
    cudaStreamSynchronize(stream_);
    try {
      for (BufferRegistration& r : registrations_)
        if (r) comm_.deregisterBuffer(r);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[%d] meshcomm-bench: deregisterBuffer: %s\n", rank_, e.what());
    }
    if (ncclPreMul_) nccl_.redOpDestroy(*ncclPreMul_, ncclComm_);
    if (ncclComm_ != nullptr) nccl_.commDestroy(ncclComm_);
    cudaFree(sendPool_);
    cudaFree(recvPool_);
    cudaFree(wrong_);
    cudaStreamDestroy(stream_);
  }

  void initNccl() {
    nccl_ = NcclApi::load();  // throws "--compare nccl needs libnccl.so.2 ..."
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);
    nccl::UniqueId id{};
    if (rank_ == 0) nccl_.check(nccl_.getUniqueId(&id), "GetUniqueId");
    comm_.communicator().bootstrap().broadcast(&id, sizeof(id), 0);
    nccl_.check(nccl_.commInitRank(&ncclComm_, n_, id, rank_), "CommInitRank");
    if (rank_ == 0)
      std::printf("# NCCL %s from %s, NCCL_NVLS_ENABLE=%s\n", nccl_.versionString().c_str(),
                  nccl_.path.c_str(), std::getenv("NCCL_NVLS_ENABLE"));
    ncclType_ = ncclType(o_.dtype, nccl_.version);
    if (o_.redop == ReduceOp::PreMulSum) {
      if (nccl_.redOpCreatePreMulSum != nullptr && ncclType_) {
        nccl::RedOp op;
        double s64 = hostScalar_;
        float s32 = static_cast<float>(hostScalar_);
        // Host-immediate scalar (residence 1) of the collective's type: pass a value of that width.
        int64_t si = static_cast<int64_t>(hostScalar_);
        void* p = o_.dtype == DataType::F64 ? static_cast<void*>(&s64)
                  : isFloatType(o_.dtype)   ? static_cast<void*>(&s32)
                                            : static_cast<void*>(&si);
        if (o_.dtype == DataType::F16 || o_.dtype == DataType::BF16 || !isFloatType(o_.dtype) ||
            o_.dtype == DataType::F8E4M3 || o_.dtype == DataType::F8E5M2)
          p = nullptr;  // would need the exact NCCL host encoding of this type: not compared
        if (p != nullptr && nccl_.redOpCreatePreMulSum(&op, p, *ncclType_, 1, ncclComm_) == 0)
          ncclPreMul_ = op;
      }
    }
  }

  void run() {
    if (o_.compareNccl) initNccl();
    if (rank_ == 0) printHeader();
    for (Op op : o_.ops) runOp(op);
    if (rank_ == 0) {
      double sum = 0;
      int k = 0;
      for (const Row& r : rows_) {
        for (double t : {r.oopUs, r.ipUs})
          if (!std::isnan(t) && t > 0) {
            sum += algbw(r.size, t) * busFactor(r.op, n_);
            ++k;
          }
      }
      std::printf("# Avg bus bandwidth    : %.3f GB/s\n", k ? sum / k : 0.0);
      long long wrong = 0;
      for (const Row& r : rows_) wrong += std::max(0ll, r.oopWrong) + std::max(0ll, r.ipWrong);
      std::printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
      if (!o_.json.empty()) writeJson();
      std::fflush(stdout);
    }
    wrongTotal_ = 0;
    for (const Row& r : rows_) wrongTotal_ += std::max(0ll, r.oopWrong) + std::max(0ll, r.ipWrong);
  }
  long long wrongTotal() const { return wrongTotal_; }

 private:
  static double algbw(uint64_t bytes, double us) { return bytes / (us * 1e-6) / 1e9; }

  // Per-rank bytes of the send and receive buffers for size S.
  uint64_t inBytes(Op op, uint64_t S) const { return (op == Op::AllGather || op == Op::Gather) ? S / n_ : S; }
  uint64_t outBytes(Op op, uint64_t S) const {
    return (op == Op::ReduceScatter || op == Op::Scatter) ? S / n_ : S;
  }
  // Rounds a requested size to nccl-tests' size: whole elements, whole chunks of n where chunks exist.
  uint64_t roundSize(Op op, uint64_t S) const {
    uint64_t unit = es_;
    if (op == Op::AllGather || op == Op::ReduceScatter || op == Op::AllToAll || op == Op::Gather ||
        op == Op::Scatter)
      unit = es_ * n_;
    if (op == Op::AllToAllv) unit = es_ * n_ * (n_ + 1) / 2;  // weights 1..n per rank (see vCounts)
    return S / unit * unit;
  }
  // alltoallv split: rank i sends w(i,j) = (i+j) % n + 1 units to j; every row and column sums to n(n+1)/2
  // units, so every rank sends and receives S bytes.
  void vCounts(uint64_t S, std::vector<size_t>& sc, std::vector<size_t>& sd, std::vector<size_t>& rc,
               std::vector<size_t>& rd) const {
    const uint64_t unit = S / es_ / (static_cast<uint64_t>(n_) * (n_ + 1) / 2);
    sc.assign(n_, 0), sd.assign(n_, 0), rc.assign(n_, 0), rd.assign(n_, 0);
    size_t s = 0, r = 0;
    for (int p = 0; p < n_; ++p) {
      sc[p] = unit * ((rank_ + p) % n_ + 1);
      rc[p] = unit * ((p + rank_) % n_ + 1);
      sd[p] = s;
      rd[p] = r;
      s += sc[p];
      r += rc[p];
    }
  }

  // Sets up size S of op (alltoallv's per-peer counts) and returns the pools' slot: the bytes between the
  // rotating iterations' buffers.
  uint64_t prepareSize(Op op, uint64_t S) {
    if (op == Op::AllToAllv) vCounts(S, sc_, sd_, rc_, rd_);
    return (std::max(inBytes(op, S), outBytes(op, S)) + 255) / 256 * 256;
  }

  // Collective when --register is given (every rank grows its pools at the same sizes).
  void ensurePools(uint64_t bytes) {
    if (bytes <= poolBytes_) return;
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (BufferRegistration& r : registrations_)
      if (r) comm_.deregisterBuffer(r);
    cudaFree(sendPool_);
    cudaFree(recvPool_);
    poolBytes_ = bytes;
    MESHCOMM_CUDA_CHECK(cudaMalloc(&sendPool_, poolBytes_));
    MESHCOMM_CUDA_CHECK(cudaMalloc(&recvPool_, poolBytes_));
    if (o_.registerBuffers) {
      registrations_[0] = comm_.registerBuffer(sendPool_, poolBytes_);
      registrations_[1] = comm_.registerBuffer(recvPool_, poolBytes_);
    }
  }

  // One call of `op` at size S on buffers (send, recv); inPlace uses recv alone.
  struct Call {
    const void* send;
    void* recv;
  };
  Call buffers(Op op, uint64_t S, uint64_t slot, int k, bool inPlace) const {
    const uint64_t slots = std::max<uint64_t>(1, poolBytes_ / slot);
    const uint64_t off = (k % slots) * slot;
    char* s = static_cast<char*>(sendPool_) + off;
    char* r = static_cast<char*>(recvPool_) + off;
    if (!inPlace) return {s, r};
    switch (op) {
      case Op::AllGather:
      case Op::Gather:
        return {r + rank_ * inBytes(op, S), r};
      case Op::ReduceScatter:
      case Op::Scatter:
        return {r, r + rank_ * outBytes(op, S)};
      default:
        return {r, r};
    }
  }

  CollectiveArgs makeArgs(Op op, uint64_t S, const Call& c, bool capturing) {
    CollectiveArgs a;
    a.collective = collectiveOf(op);
    a.input = c.send;
    a.output = c.recv;
    a.dtype = o_.dtype;
    a.op = reduceSpec();
    a.root = o_.root;
    a.stream = stream_;
    a.capturing = capturing;
    switch (op) {
      case Op::AllGather:
      case Op::Gather:
        a.count = S / es_ / n_;
        break;
      case Op::ReduceScatter:
      case Op::Scatter:
      case Op::AllToAll:
        a.count = S / es_ / n_;
        break;
      case Op::AllToAllv:
        a.sendCounts = sc_.data(), a.sendDispls = sd_.data(), a.recvCounts = rc_.data(),
        a.recvDispls = rd_.data();
        a.count = 0;
        break;
      case Op::SendRecv:
        break;  // below
      default:
        a.count = S / es_;
    }
    if (op == Op::SendRecv || (o_.asGroup && postedAsGroup(op))) {  // the group groupEnd() selects for
      p2p_.clear();
      forEachGroupedOp(op, S, c, [&](bool send, const void* buf, size_t count, int peer) {
        p2p_.push_back(P2POp{send ? P2POp::Send : P2POp::Recv, peer, const_cast<void*>(buf), count});
      });
      a.collective = Collective::SendRecv;
      a.p2pOps = p2p_.data();
      a.numP2POps = p2p_.size();
      a.count = S / es_;
    }
    return a;
  }

  // The sends and receives nccl-tests posts in one group for a postedAsGroup op, in its order:
  // fn(isSend, buffer, count in elements, peer).
  template <class Fn>
  void forEachGroupedOp(Op op, uint64_t S, const Call& c, Fn&& fn) const {
    const char* snd = static_cast<const char*>(c.send);
    char* rcv = static_cast<char*>(c.recv);
    const size_t cnt = S / es_, chunk = cnt / n_;
    for (int p = 0; p < n_; ++p) {
      if (op == Op::AllToAll) {
        fn(true, snd + p * chunk * es_, chunk, p);
        fn(false, rcv + p * chunk * es_, chunk, p);
      } else if (op == Op::AllToAllv) {
        fn(true, snd + sd_[p] * es_, sc_[p], p);
        fn(false, rcv + rd_[p] * es_, rc_[p], p);
      } else if (op == Op::Gather) {
        if (p == 0) fn(true, snd, chunk, o_.root);
        if (rank_ == o_.root) fn(false, rcv + p * chunk * es_, chunk, p);
      } else if (op == Op::Scatter) {
        if (rank_ == o_.root) fn(true, snd + p * chunk * es_, chunk, p);
        if (p == 0) fn(false, rcv, chunk, o_.root);
      } else if (p == 0) {  // SendRecv: a ring step
        fn(true, snd, cnt, (rank_ + 1) % n_);
        fn(false, rcv, cnt, (rank_ + n_ - 1) % n_);
      }
    }
  }

  ReduceOpSpec reduceSpec() const {
    if (o_.redop == ReduceOp::PreMulSum) return ReduceOpSpec::preMulSum(hostScalar_);
    return ReduceOpSpec(o_.redop);
  }

  void launchMeshcomm(Op op, uint64_t S, const Call& c) {
    const DataType t = o_.dtype;
    const size_t cnt = S / es_;
    if (!o_.algo.empty()) {
      comm_.run(makeArgs(op, S, c, capturing_), o_.algo);
      return;
    }
    if (op == Op::SendRecv || (o_.asGroup && postedAsGroup(op))) {
      comm_.groupStart();
      forEachGroupedOp(op, S, c, [&](bool send, const void* buf, size_t count, int peer) {
        if (send)
          comm_.send(buf, count, t, peer, stream_);
        else
          comm_.recv(const_cast<void*>(buf), count, t, peer, stream_);
      });
      comm_.groupEnd();
      return;
    }
    switch (op) {
      case Op::AllReduce:
        comm_.allReduce(c.send, c.recv, cnt, t, reduceSpec(), stream_);
        break;
      case Op::AllGather:
        comm_.allGather(c.send, c.recv, cnt / n_, t, stream_);
        break;
      case Op::ReduceScatter:
        comm_.reduceScatter(c.send, c.recv, cnt / n_, t, reduceSpec(), stream_);
        break;
      case Op::AllToAll:
        comm_.allToAll(c.send, c.recv, cnt / n_, t, stream_);
        break;
      case Op::Broadcast:
        comm_.broadcast(c.send, c.recv, cnt, t, o_.root, stream_);
        break;
      case Op::Reduce:
        comm_.reduce(c.send, c.recv, cnt, t, reduceSpec(), o_.root, stream_);
        break;
      case Op::Gather:
        comm_.gather(c.send, c.recv, cnt / n_, t, o_.root, stream_);
        break;
      case Op::Scatter:
        comm_.scatter(c.send, c.recv, cnt / n_, t, o_.root, stream_);
        break;
      case Op::AllToAllv:
        comm_.allToAllv(c.send, sc_.data(), sd_.data(), c.recv, rc_.data(), rd_.data(), t, stream_);
        break;
      case Op::SendRecv:
        break;  // posted as a group above
    }
  }

  bool ncclSupports(Op op) const {
    if (!ncclType_) return false;
    if (isReducing(op) && o_.redop == ReduceOp::PreMulSum && !ncclPreMul_) return false;
    return true;
  }

  void launchNccl(Op op, uint64_t S, const Call& c) {
    const nccl::DataType t = *ncclType_;
    const size_t cnt = S / es_;
    nccl::RedOp rop = nccl::Sum;
    switch (o_.redop) {
      case ReduceOp::Sum:
        rop = nccl::Sum;
        break;
      case ReduceOp::Prod:
        rop = nccl::Prod;
        break;
      case ReduceOp::Min:
        rop = nccl::Min;
        break;
      case ReduceOp::Max:
        rop = nccl::Max;
        break;
      case ReduceOp::Avg:
        rop = nccl::Avg;
        break;
      case ReduceOp::PreMulSum:
        rop = ncclPreMul_ ? *ncclPreMul_ : nccl::Sum;
        break;
    }
    const char* snd = static_cast<const char*>(c.send);
    char* rcv = static_cast<char*>(c.recv);
    auto& N = nccl_;
    switch (op) {
      case Op::AllReduce:
        N.check(N.allReduce(snd, rcv, cnt, t, rop, ncclComm_, stream_), "AllReduce");
        break;
      case Op::AllGather:
        N.check(N.allGather(snd, rcv, cnt / n_, t, ncclComm_, stream_), "AllGather");
        break;
      case Op::ReduceScatter:
        N.check(N.reduceScatter(snd, rcv, cnt / n_, t, rop, ncclComm_, stream_), "ReduceScatter");
        break;
      case Op::Broadcast:
        N.check(N.broadcast(snd, rcv, cnt, t, o_.root, ncclComm_, stream_), "Broadcast");
        break;
      case Op::Reduce:
        N.check(N.reduce(snd, rcv, cnt, t, rop, o_.root, ncclComm_, stream_), "Reduce");
        break;
      case Op::AllToAll:
      case Op::AllToAllv:
      case Op::Gather:
      case Op::Scatter:
      case Op::SendRecv:
        N.check(N.groupStart(), "GroupStart");
        forEachGroupedOp(op, S, c, [&](bool send, const void* buf, size_t count, int peer) {
          if (send)
            N.check(N.send(buf, count, t, peer, ncclComm_, stream_), "Send");
          else
            N.check(N.recv(const_cast<void*>(buf), count, t, peer, ncclComm_, stream_), "Recv");
        });
        N.check(N.groupEnd(), "GroupEnd");
        break;
    }
  }

  // Average over ranks of this rank's time (bootstrap allGather).
  double averageOverRanks(double us) {
    std::vector<double> all(n_);
    all[rank_] = us;
    comm_.communicator().bootstrap().allGather(all.data(), sizeof(double));
    double s = 0;
    for (double v : all) s += v;
    return s / n_;
  }

  // -v: one line per rank with its repeats (rank 0 prints; every rank takes part in the gather).
  void printRepeats(const std::vector<double>& repeats) {
    const size_t m = repeats.size();  // the same on every rank
    std::vector<double> all(static_cast<size_t>(n_) * m);
    std::copy(repeats.begin(), repeats.end(), all.begin() + static_cast<size_t>(rank_) * m);
    comm_.communicator().bootstrap().allGather(all.data(), m * sizeof(double));
    if (rank_ != 0) return;
    for (int r = 0; r < n_; ++r) {
      std::printf("#   repeats rank %d:", r);
      for (size_t k = 0; k < m; ++k) std::printf(" %8.2f", all[r * m + k]);
      std::printf("\n");
    }
  }

  // Times `launch(call k)` per nccl-tests: warm-up, barrier, -n iterations (eager or one graph), average; the
  // median of tools::timedRepeats(bytes) such timings (repeat_timing.hpp, see the top of the file).
  double timeOp(const std::function<void(int)>& launch, uint64_t bytes, bool graph) {
    for (int k = 0; k < o_.warmup; ++k) launch(k);
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraphExec_t exec = nullptr;
    if (graph) {
      cudaGraph_t g = nullptr;
      capturing_ = true;
      MESHCOMM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        for (int k = 0; k < o_.iters; ++k) launch(k);
      } catch (...) {
        cudaStreamEndCapture(stream_, &g);
        if (g) cudaGraphDestroy(g);
        capturing_ = false;
        throw;
      }
      capturing_ = false;
      MESHCOMM_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
      MESHCOMM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      MESHCOMM_CUDA_CHECK(cudaGraphDestroy(g));
      MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, stream_));  // untimed replay
      MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    // Timed repeats, each aligned by a host barrier; the median resists one-off stalls (a single timed
    // launch let one hiccup of either library decide a whole row).
    std::vector<double> repeats;
    const int launches = graph ? o_.graphLaunches : 1;
    const double us = tools::medianTimedUs(
        tools::timedRepeats(bytes, graph), o_.iters * launches,
        [&] { comm_.communicator().bootstrap().barrier(); },
        [&] {
          if (graph) {
            for (int l = 0; l < launches; ++l) MESHCOMM_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
          } else {
            for (int k = 0; k < o_.iters; ++k) launch(k);
          }
          MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
        },
        &repeats);
    if (o_.verbose) printRepeats(repeats);
    if (exec) cudaGraphExecDestroy(exec);
    comm_.checkError();
    return averageOverRanks(us);
  }

  // Fresh inputs, one call, wrong elements summed over ranks.
  long long checkOp(Op op, uint64_t S, bool inPlace) {
    const bool red = isReducing(op);
    const Call c = buffers(op, S, std::max<uint64_t>(1, poolBytes_), 0, inPlace);  // one slot: offset 0
    MESHCOMM_CUDA_CHECK(
        cudaMemsetAsync(recvPool_, 0xFF, std::min<uint64_t>(poolBytes_, 2 * S + 4096), stream_));
    const uint64_t inCount = inBytes(op, S) / es_;
    fillCheckKernel<<<gridFor(inCount), 256, 0, stream_>>>(const_cast<void*>(c.send), inCount, o_.dtype,
                                                           o_.redop, n_, rank_, red, 0);
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
    launchMeshcomm(op, S, c);
    CheckSpec cs{o_.dtype, o_.redop, n_, red, 0, -1, 1, 0, static_cast<float>(hostScalar_), 0};
    if (red && isFloatType(o_.dtype) &&
        (o_.redop == ReduceOp::Sum || o_.redop == ReduceOp::Avg || o_.redop == ReduceOp::PreMulSum))
      cs.tolFactor = static_cast<float>((n_ + 2) * unitRoundoff(o_.dtype));
    const uint64_t outCount = outBytes(op, S) / es_;
    uint64_t checkCount = outCount;
    const uint64_t chunk = S / es_ / n_;
    switch (op) {
      case Op::ReduceScatter:
        cs.first = rank_ * chunk;
        break;
      case Op::Reduce:
      case Op::Gather:
        if (rank_ != o_.root) checkCount = 0;
        cs.perSrc = chunk;
        if (op == Op::Reduce) cs.perSrc = 1;
        break;
      case Op::AllGather:
        cs.perSrc = chunk;
        break;
      case Op::Broadcast:
        cs.srcFixed = o_.root;
        cs.perSrc = ~0ull;
        break;
      case Op::Scatter:
        cs.srcFixed = o_.root;
        cs.perSrc = ~0ull;
        cs.srcFirst = rank_ * chunk;
        break;
      case Op::AllToAll:
        cs.perSrc = chunk;
        cs.srcFirst = rank_ * chunk;
        break;
      case Op::SendRecv:
        cs.srcFixed = (rank_ + n_ - 1) % n_;
        cs.perSrc = ~0ull;
        break;
      case Op::AllToAllv:
        checkCount = 0;
        break;  // checked per chunk below
      default:
        break;
    }
    MESHCOMM_CUDA_CHECK(cudaMemsetAsync(wrong_, 0, sizeof(unsigned long long), stream_));
    if (checkCount != 0) {
      countWrongKernel<<<gridFor(checkCount), 256, 0, stream_>>>(c.recv, checkCount, cs, wrong_);
      MESHCOMM_CUDA_CHECK(cudaGetLastError());
    }
    if (op == Op::AllToAllv) {
      // chunk from p: p's elements at its sendDispls[rank] (rank p's row starts at sum of its earlier counts)
      const uint64_t unit = S / es_ / (static_cast<uint64_t>(n_) * (n_ + 1) / 2);
      for (int p = 0; p < n_; ++p) {
        uint64_t srcOff = 0;
        for (int q = 0; q < rank_; ++q) srcOff += unit * ((p + q) % n_ + 1);
        CheckSpec v = cs;
        v.srcFixed = p;
        v.perSrc = ~0ull;
        v.srcFirst = srcOff;
        if (rc_[p] != 0) {
          countWrongKernel<<<gridFor(rc_[p]), 256, 0, stream_>>>(static_cast<char*>(c.recv) + rd_[p] * es_,
                                                                 rc_[p], v, wrong_);
          MESHCOMM_CUDA_CHECK(cudaGetLastError());
        }
      }
    }
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    comm_.checkError();
    unsigned long long w = 0;
    MESHCOMM_CUDA_CHECK(cudaMemcpy(&w, wrong_, sizeof(w), cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> all(n_);
    all[rank_] = w;
    comm_.communicator().bootstrap().allGather(all.data(), sizeof(unsigned long long));
    long long total = 0;
    for (auto v : all) total += static_cast<long long>(v);
    return total;
  }

  void runOp(Op op) {
    std::vector<uint64_t> sizes;
    for (double s = static_cast<double>(o_.minBytes); s <= static_cast<double>(o_.maxBytes) * 1.0000001;
         s *= o_.factor) {
      const uint64_t r = roundSize(op, static_cast<uint64_t>(s));
      if (r != 0 && (sizes.empty() || sizes.back() != r)) sizes.push_back(r);
    }
    if (sizes.empty()) return;
    uint64_t maxBuf = 0;
    for (uint64_t S : sizes) maxBuf = std::max({maxBuf, inBytes(op, S), outBytes(op, S)});
    ensurePools(std::max<uint64_t>(maxBuf, 1 << 20) + 4096);
    for (uint64_t S : sizes) {
      Row row;
      row.op = op;
      row.size = S;
      row.count = S / es_;
      row.root = isRooted(op) ? o_.root : -1;
      row.graph = S <= o_.graphMax;
      const uint64_t slot = prepareSize(op, S);
      try {
        const Call c0 = buffers(op, S, slot, 0, false);
        if (const Selection sel = comm_.select(makeArgs(op, S, c0, row.graph)); sel.algorithm)
          row.algo = o_.algo.empty() ? sel.algorithm->name() : o_.algo;
      } catch (const std::exception& e) {
        row.algo = "?";
      }
      const auto timeOopOnce = [&] {
        return timeOp([&](int k) { launchMeshcomm(op, S, buffers(op, S, slot, k, false)); }, S, row.graph);
      };
      // The first row of a run is timed twice and the first timing dropped: it runs on GPUs whose clocks
      // are still ramping up from idle and loads kernels lazily (a single timing comes out 1.5-2x slow).
      if (S == sizes.front()) timeOopOnce();
      row.oopUs = timeOopOnce();
      if (o_.check) row.oopWrong = checkOp(op, S, false);
      if (hasInPlace(op)) {
        row.ipUs = timeOp([&](int k) { launchMeshcomm(op, S, buffers(op, S, slot, k, true)); }, S, row.graph);
        if (o_.check) row.ipWrong = checkOp(op, S, true);
      }
      if (o_.compareNccl && ncclSupports(op))
        row.ncclUs = timeOp([&](int k) { launchNccl(op, S, buffers(op, S, slot, k, false)); }, S, row.graph);
      rows_.push_back(row);
      if (rank_ == 0) printRow(row);
    }
    if (o_.hostCostCalls > 0) measureHostCost(op, sizes.front());
  }

  // Host us per call of `calls` enqueued back to back (after the stream drained and a barrier), median of 9
  // repeats, average over ranks. Only the enqueueing is timed, not the GPU work.
  double hostUsPerCall(int calls, const std::function<void(int)>& call) {
    const double us = tools::medianTimedUs(
        9, calls,
        [&] {
          MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
          comm_.communicator().bootstrap().barrier();
        },
        [&] {
          for (int k = 0; k < calls; ++k) call(k);
        });
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    comm_.checkError();
    return averageOverRanks(us);
  }

  void measureHostCost(Op op, uint64_t S) {
    HostCost h;
    h.op = op;
    h.size = S;
    h.calls = o_.hostCostCalls;
    const uint64_t slot = prepareSize(op, S);
    h.launchUs = hostUsPerCall(h.calls, [&](int) {
      emptyKernel<<<1, 1, 0, stream_>>>();
      MESHCOMM_CUDA_CHECK(cudaGetLastError());
    });
    h.meshcommUs =
        hostUsPerCall(h.calls, [&](int k) { launchMeshcomm(op, S, buffers(op, S, slot, k, false)); });
    if (o_.compareNccl && ncclSupports(op))
      h.ncclUs = hostUsPerCall(h.calls, [&](int k) { launchNccl(op, S, buffers(op, S, slot, k, false)); });
    hostCosts_.push_back(h);
    if (rank_ != 0) return;
    std::printf(
        "# host us per eager call, %s %llu B (%d calls back to back, median of 9, average over ranks): "
        "meshcomm %.2f",
        opName(op), static_cast<unsigned long long>(S), h.calls, h.meshcommUs);
    if (!std::isnan(h.ncclUs)) std::printf(" | NCCL %.2f", h.ncclUs);
    std::printf(" | bare cudaLaunchKernel %.2f | meshcomm - launch %.2f\n", h.launchUs,
                h.meshcommUs - h.launchUs);
    std::fflush(stdout);
  }

  void printHeader() const {
    std::printf(
        "# meshcomm-bench: %d ranks, type %s, redop %s, iters %d, warmup %d, timing %s, graph launches %d, "
        "check %d%s\n",
        n_, dataTypeName(o_.dtype), reduceOpName(o_.redop), o_.iters, o_.warmup,
        o_.graphMax == 0 ? "eager"
                         : (o_.graphMax == ~0ull ? "graph" : "graph up to --graph-max, eager above"),
        o_.graphLaunches, o_.check,
        (o_.algo.empty() ? std::string() : ", algorithm " + o_.algo)
            .append(o_.asGroup ? ", as groups" : "")
            .c_str());
    std::printf(
        "# time = average over ranks (nccl-tests -a 1); ratio = nccl_us / meshcomm out-of-place us\n#\n");
    std::printf("# %-14s %12s %12s %8s %6s %6s | %9s %8s %8s %6s | %9s %8s %8s %6s%s\n", "op", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                "busbw", "#wrong", o_.compareNccl ? " | nccl_us    ratio  algo" : " | algo");
    std::printf("# %-14s %12s %12s %8s %6s %6s | %9s %8s %8s %6s | %9s %8s %8s %6s\n", "", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }

  void printRow(const Row& r) const {
    auto cols = [&](double us, long long wrong, bool defined) {
      char b[96];
      if (!defined || std::isnan(us)) {
        std::snprintf(b, sizeof(b), "%9s %8s %8s %6s", "N/A", "N/A", "N/A", "N/A");
      } else {
        char w[16];
        if (wrong < 0)
          std::snprintf(w, sizeof(w), "N/A");
        else
          std::snprintf(w, sizeof(w), "%lld", wrong);
        const double a = algbw(r.size, us);
        std::snprintf(b, sizeof(b), "%9.2f %8.2f %8.2f %6s", us, a, a * busFactor(r.op, n_), w);
      }
      return std::string(b);
    };
    std::string extra;
    if (o_.compareNccl) {
      char b[64];
      if (std::isnan(r.ncclUs))
        std::snprintf(b, sizeof(b), " | %9s %7s", "N/A", "N/A");
      else
        std::snprintf(b, sizeof(b), " | %9.2f %7.3f", r.ncclUs, r.ncclUs / r.oopUs);
      extra = b;
    } else {
      extra = " |";
    }
    std::printf("  %-14s %12llu %12llu %8s %6s %6d | %s | %s%s  %s%s\n", opName(r.op),
                static_cast<unsigned long long>(r.size), static_cast<unsigned long long>(r.count),
                dataTypeName(o_.dtype), isReducing(r.op) ? reduceOpName(o_.redop) : "none", r.root,
                cols(r.oopUs, r.oopWrong, true).c_str(), cols(r.ipUs, r.ipWrong, hasInPlace(r.op)).c_str(),
                extra.c_str(), r.algo.c_str(), r.graph ? " [graph]" : "");
    std::fflush(stdout);
  }

  void writeJson() const {
    std::ofstream f(o_.json);
    if (!f) MESHCOMM_THROW(ErrorCode::SystemError, "meshcomm-bench: cannot write ", o_.json);
    cudaDeviceProp prop{};
    MESHCOMM_CUDA_CHECK(cudaGetDeviceProperties(&prop, comm_.cudaDevice()));
    nlohmann::json j = tools::runRecord("meshcomm-bench", prop.name, n_, o_.command);
    j["iters"] = o_.iters;
    j["warmup"] = o_.warmup;
    j["graph_launches"] = o_.graphLaunches;
    j["time"] = "average over ranks";
    j["nccl_version"] = o_.compareNccl ? nlohmann::json(nccl_.versionString()) : nlohmann::json(nullptr);
    nlohmann::json rows = nlohmann::json::array();
    for (const Row& r : rows_) {
      const double fac = busFactor(r.op, n_);
      auto bw = [&](double us) { return tools::numberOrNull(std::isnan(us) ? us : algbw(r.size, us)); };
      auto bbw = [&](double us) {
        return tools::numberOrNull(std::isnan(us) ? us : algbw(r.size, us) * fac);
      };
      auto wrong = [](long long w) { return w < 0 ? nlohmann::json(nullptr) : nlohmann::json(w); };
      rows.push_back({{"op", opName(r.op)},
                      {"size", r.size},
                      {"count", r.count},
                      {"type", dataTypeName(o_.dtype)},
                      {"redop", isReducing(r.op) ? reduceOpName(o_.redop) : "none"},
                      {"root", r.root},
                      {"timing", r.graph ? "graph" : "eager"},
                      {"algo", r.algo},
                      {"oop_time_us", tools::numberOrNull(r.oopUs)},
                      {"oop_algbw", bw(r.oopUs)},
                      {"oop_busbw", bbw(r.oopUs)},
                      {"oop_wrong", wrong(r.oopWrong)},
                      {"ip_time_us", tools::numberOrNull(r.ipUs)},
                      {"ip_algbw", bw(r.ipUs)},
                      {"ip_busbw", bbw(r.ipUs)},
                      {"ip_wrong", wrong(r.ipWrong)},
                      {"nccl_time_us", tools::numberOrNull(r.ncclUs)},
                      {"nccl_algbw", bw(r.ncclUs)},
                      {"nccl_busbw", bbw(r.ncclUs)},
                      {"ratio", tools::numberOrNull(std::isnan(r.ncclUs) ? r.ncclUs : r.ncclUs / r.oopUs)}});
    }
    j["rows"] = std::move(rows);
    nlohmann::json hostCosts = nlohmann::json::array();
    for (const HostCost& h : hostCosts_)
      hostCosts.push_back({{"op", opName(h.op)},
                           {"size", h.size},
                           {"calls", h.calls},
                           {"meshcomm_host_us", tools::numberOrNull(h.meshcommUs)},
                           {"nccl_host_us", tools::numberOrNull(h.ncclUs)},
                           {"launch_host_us", tools::numberOrNull(h.launchUs)}});
    if (!hostCosts.empty()) j["host_cost"] = std::move(hostCosts);
    f << j.dump(1) << "\n";
  }

  Comm& comm_;
  Options o_;
  int n_, rank_;
  size_t es_;
  cudaStream_t stream_ = nullptr;
  void* sendPool_ = nullptr;
  BufferRegistration registrations_[2];  // --register: send and recv pools
  void* recvPool_ = nullptr;
  uint64_t poolBytes_ = 0;
  unsigned long long* wrong_ = nullptr;
  double hostScalar_ = 1.0;
  bool capturing_ = false;
  std::vector<size_t> sc_, sd_, rc_, rd_;
  std::vector<P2POp> p2p_;  // makeArgs' group (sendrecv, --as-group)
  std::vector<Row> rows_;
  std::vector<HostCost> hostCosts_;
  long long wrongTotal_ = 0;
  NcclApi nccl_;
  nccl::Comm ncclComm_ = nullptr;
  std::optional<nccl::DataType> ncclType_;
  std::optional<nccl::RedOp> ncclPreMul_;
};

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  try {
    opts = parseArgs(argc, argv);
    opts.command = tools::commandLine(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  int exitCode = 0;
  const std::optional<RankEnv> rankEnv = tools::prepareGpuToolRank("meshcomm-bench", argv[0], 2, exitCode);
  if (!rankEnv) return exitCode;
  const RankEnv& env = *rankEnv;
  long long wrong = 0;
  try {
    MESHCOMM_CUDA_CHECK(cudaSetDevice(env.localRank));
    // This file's kernels (fill, check) may be queued behind plans that wait on PortChannel proxies
    // (MESHCOMM_PLAN_DIR): load them now, not lazily then (docs/architecture.md, "Kernel loading").
    loadKernelModuleOf(reinterpret_cast<const void*>(&countWrongKernel));
    auto bootstrap = TcpBootstrap::fromEnvironment();
    CommConfig cfg;
    cfg.cudaDevice = env.localRank;
    Comm comm(bootstrap, cfg);
    if (opts.root < 0 || opts.root >= comm.size())
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "meshcomm-bench: --root ", opts.root, " out of range");
    {
      Bench bench(comm, opts);
      bench.run();
      wrong = bench.wrongTotal();
    }
    bootstrap->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] meshcomm-bench: %s\n", env.rank, e.what());
    return 1;
  }
  return wrong == 0 ? 0 : 1;
}
