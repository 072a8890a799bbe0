// EpBuffer's kernels (docs/ep.md): layout, dispatch send, dispatch receive, combine. The communicating
// kernels run `blocks` blocks of kThreads threads, all resident (the host checks blocks <= multiprocessors);
// each reads its call's epoch from a device counter, and block 0 advances the counter once every block has
// read it, so graph replays stay in step.
#include <cuda_bf16.h>

#include <algorithm>

#include "ep/ep_epoch.cuh"
#include "ep/ep_kernels.cuh"
#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::ep::kernels {

namespace {

constexpr int kWarps = kThreads / 32;

// The LL flag of epoch e: never 0 (fresh or zeroed memory never matches).
__device__ __forceinline__ uint32_t flagOf(uint64_t e) {
  return static_cast<uint32_t>((e - 1) % 0xFFFFFFFFull) + 1;
}

// Acquire wait until the counter at `p` (stored with release) reaches `expected`; false on timeout or abort
// (reported through ctx as `op`).
__device__ bool awaitCount(const uint64_t* p, uint64_t expected, const SpinContext& ctx, DeviceOp op) {
  return device::spinUntil(
      [&](uint64_t& seen) {
        seen = device::loadAcquireSys(p);
        return device::reached(seen, expected);
      },
      ctx, op, expected);
}

// ---- layout --------------------------------------------------------------------------------------------

// One thread a token: the ranks holding its experts (deduplicated) and the per-rank and per-expert counts.
// Local memory only; the counts were zeroed on the stream before.
__global__ void layoutKernel(const int64_t* topkIdx, int tokens, int topk, int numExperts, int ranks,
                             SpinContext spin, int* tokensPerRank, int* tokensPerExpert, bool* tokenInRank) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const int perRank = numExperts / ranks;
  uint32_t mask = 0;
  for (int k = 0; k < topk; ++k) {
    const int64_t e = topkIdx[static_cast<int64_t>(t) * topk + k];
    if (e < 0) {
      if (e != -1)
        device::reportTimeout(spin, DeviceOp::EpBadExpert, numExperts, static_cast<uint64_t>(e), 0);
      continue;
    }
    if (e >= numExperts) {
      device::reportTimeout(spin, DeviceOp::EpBadExpert, numExperts, static_cast<uint64_t>(e), 0);
      continue;
    }
    atomicAdd(&tokensPerExpert[e], 1);
    mask |= 1u << (e / perRank);
  }
  for (int r = 0; r < ranks; ++r) {
    const bool in = (mask >> r) & 1u;
    tokenInRank[static_cast<int64_t>(t) * ranks + r] = in;
    if (in) atomicAdd(&tokensPerRank[r], 1);
  }
}

// ---- dispatch ------------------------------------------------------------------------------------------

// Word w of the count row this rank sends destination d (see kCountWords).
__device__ int32_t countWord(const DispatchInputs& in, int ranks, int localExperts, int d, int w) {
  if (w < ranks) return in.tokensPerRank[w];
  if (w < ranks + localExperts) {
    return in.tokensPerExpert ? in.tokensPerExpert[d * localExperts + (w - ranks)] : 0;
  }
  if (w == ranks + localExperts) return in.tokens;
  return 0;
}

// Tokens before `end` that go to rank d (a warp reduction; every lane gets the sum).
__device__ int countBefore(const bool* tokenInRank, int ranks, int d, int end) {
  int n = 0;
  for (int t = threadIdx.x % 32; t < end; t += 32)
    n += tokenInRank[static_cast<int64_t>(t) * ranks + d] ? 1 : 0;
  for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
  return n;
}

// Phase 1 (counts): block 0 sends this rank's count row to every destination as LL packets (flag: the epoch);
// every block reads every source's row (acquire by flag) — a destination's row of this epoch also means it
// has finished with its region's previous rows (its receive of the previous call ran before, on its stream).
// Phase 2 (rows): each selected row is written with weak stores at its final place in the destination's
// region; after the block barrier, one release-add per destination on its arrival counter for this rank.
__global__ void __launch_bounds__(kThreads, 1)
    dispatchSendKernel(KernelView v, DispatchInputs in, Shape shape) {
  const int R = v.size, me = v.rank, El = shape.numExperts / R;
  const uint64_t e = beginEpoch(v.dispatchEpoch, v.dispatchStarted);
  const uint32_t flag = flagOf(e);
  const int countWords = R + El + 1;
  const int countPackets = (countWords + 1) / 2;
  __shared__ int32_t M[kMaxRanks][kMaxRanks + 1];  // M[s][d]: tokens s sends d; M[s][R]: s's tokens
  __shared__ int32_t offset[kMaxRanks], total[kMaxRanks];
  __shared__ bool skip[kMaxRanks];

  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < R * countPackets; i += blockDim.x) {
      const int d = i / countPackets, p = i % countPackets;
      auto* dst = reinterpret_cast<LL16Packet*>(v.regions[d] + v.layout.counts + me * kCountPacketBytes);
      dst[p].write(countWord(in, R, El, d, 2 * p), countWord(in, R, El, d, 2 * p + 1), flag);
    }
  }
  // Every block reads the words it needs of every source's row: the R token counts and the token count.
  for (int i = threadIdx.x; i < R * (R + 1); i += blockDim.x) {
    const int s = i / (R + 1), w = i % (R + 1);
    const int word = w < R ? w : R + El;
    const auto* src =
        reinterpret_cast<const LL16Packet*>(v.regions[me] + v.layout.counts + s * kCountPacketBytes);
    uint32_t vals[2] = {0, 0};
    if (device::awaitPacket(src, word / 2, flag, v.spin[s], vals) != device::PacketWait::Arrived) vals[0] = 0;
    M[s][w] = static_cast<int32_t>(vals[word % 2]);
  }
  __syncthreads();
  const RowLayout rl = RowLayout::of(shape);
  const int64_t capacity = static_cast<int64_t>(v.layout.rowsBytes / rl.stride);
  if (threadIdx.x < R) {
    const int d = threadIdx.x;
    int off = 0, sum = 0;
    for (int s = 0; s < R; ++s) {
      if (s < me) off += M[s][d];
      sum += M[s][d];
    }
    offset[d] = off;
    total[d] = sum;
    skip[d] = sum > capacity;
    if (skip[d] && blockIdx.x == 0) device::reportTimeout(v.spin[d], DeviceOp::EpOverflow, sum, capacity, 0);
  }
  __syncthreads();
  if (blockIdx.x == 0) {
    // This rank's totals for the receive kernel (device) and for the host (mapped; the tag last).
    for (int i = threadIdx.x; i < R * (R + 1); i += blockDim.x) v.matrix[i] = M[i / (R + 1)][i % (R + 1)];
    for (int x = threadIdx.x; x < El; x += blockDim.x) {
      int32_t n = 0;
      for (int s = 0; s < R; ++s) {
        const auto* src =
            reinterpret_cast<const LL16Packet*>(v.regions[me] + v.layout.counts + s * kCountPacketBytes);
        const int word = R + x;
        uint32_t vals[2] = {0, 0};
        if (device::awaitPacket(src, word / 2, flag, v.spin[s], vals) == device::PacketWait::Arrived)
          n += static_cast<int32_t>(vals[word % 2]);
      }
      const int a = in.expertAlignment > 1 ? in.expertAlignment : 1;
      v.hostCounts->perLocalExpert[x] = (n + a - 1) / a * a;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      *v.receivedRows = total[me];
      v.hostCounts->rows = total[me];
      __threadfence_system();
      device::storeReleaseSys(&v.hostCounts->tag, v.hostTicket);
      device::storeReleaseSys(v.countsEpoch, e);  // the receive kernel may now read the matrix
    }
  }

  // Phase 2: warps by (destination, part of this block's token chunk).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int parts = std::max(1, kWarps / R);
  const int d = warp % R, part = warp / R;
  if (part < parts && !skip[d]) {
    const int chunk = (in.tokens + gridDim.x - 1) / gridDim.x;
    const int begin = std::min(in.tokens, static_cast<int>(blockIdx.x) * chunk);
    const int end = std::min(in.tokens, begin + chunk);
    const int sub = (end - begin + parts - 1) / parts;
    const int t0 = std::min(end, begin + part * sub), t1 = std::min(end, t0 + sub);
    int row = offset[d] + countBefore(in.tokenInRank, R, d, t0);
    char* rows = v.regions[d] + v.layout.rows;
    for (int base = t0; base < t1; base += 32) {
      const int t = base + lane;
      const bool selected = t < t1 && in.tokenInRank[static_cast<int64_t>(t) * R + d];
      uint32_t mask = __ballot_sync(0xffffffffu, selected);
      while (mask) {
        const int bit = __ffs(mask) - 1;
        mask &= mask - 1;
        const int64_t token = base + bit;
        char* dst = rows + static_cast<uint64_t>(row) * rl.stride;
        device::copy(dst, static_cast<const char*>(in.x) + token * shape.hiddenBytes, shape.hiddenBytes, lane,
                     32);
        for (int k = lane; k < shape.topk; k += 32) {
          const int64_t idx = in.topkIdx[token * shape.topk + k];
          const bool local = idx >= static_cast<int64_t>(d) * El && idx < static_cast<int64_t>(d + 1) * El;
          reinterpret_cast<int64_t*>(dst + rl.topkIdx)[k] = local ? idx - static_cast<int64_t>(d) * El : -1;
          reinterpret_cast<float*>(dst + rl.weights)[k] =
              local && in.topkWeights ? in.topkWeights[token * shape.topk + k] : 0.0f;
        }
        for (int c = lane; c < shape.scales; c += 32)
          reinterpret_cast<float*>(dst + rl.scales)[c] = in.scales[token * shape.scales + c];
        if (lane == 0) *reinterpret_cast<int32_t*>(dst + rl.srcIdx) = static_cast<int32_t>(token);
        ++row;
      }
    }
  }
  __syncthreads();  // every warp's rows are written before the records below
  // Warp d: this block's row range in d's rows (its tokens [begin, end) that go to d), published as the
  // record [me][block] with one lane's system fence first (a release of every warp's rows, ordered by the
  // barrier). Written also when nothing was sent (an empty range, or a skipped destination).
  if (warp < R) {
    const int chunk = (in.tokens + gridDim.x - 1) / gridDim.x;
    const int begin = std::min(in.tokens, static_cast<int>(blockIdx.x) * chunk);
    const int end = std::min(in.tokens, begin + chunk);
    const int first = offset[warp] + countBefore(in.tokenInRank, R, warp, begin);
    const int last = skip[warp] ? first : offset[warp] + countBefore(in.tokenInRank, R, warp, end);
    if (lane == 0) {
      __threadfence_system();
      reinterpret_cast<LL16Packet*>(v.regions[warp] + v.layout.records)[me * kMaxSendBlocks + blockIdx.x]
          .write(static_cast<uint32_t>(first), static_cast<uint32_t>(last), flag);
    }
  }
  endEpoch(e, v.dispatchEpoch, v.dispatchStarted);
}

// Warp's copy of received row i (this rank's region, plain loads after the caller's acquire) into the
// outputs.
__device__ void copyReceivedRow(const KernelView& v, const DispatchOutputs& out, const Shape& shape,
                                const RowLayout& rl, int64_t i, int lane) {
  const char* src = v.regions[v.rank] + v.layout.rows + static_cast<uint64_t>(i) * rl.stride;
  device::copy(static_cast<char*>(out.x) + i * shape.hiddenBytes, src, shape.hiddenBytes, lane, 32);
  for (int k = lane; k < shape.topk; k += 32) {
    if (out.topkIdx) out.topkIdx[i * shape.topk + k] = reinterpret_cast<const int64_t*>(src + rl.topkIdx)[k];
    if (out.topkWeights)
      out.topkWeights[i * shape.topk + k] = reinterpret_cast<const float*>(src + rl.weights)[k];
  }
  for (int c = lane; c < shape.scales; c += 32)
    out.scales[i * shape.scales + c] = reinterpret_cast<const float*>(src + rl.scales)[c];
  if (lane == 0 && out.srcIdx) out.srcIdx[i] = *reinterpret_cast<const int32_t*>(src + rl.srcIdx);
}

// Runs beside the send kernel (another stream; it counts its calls on its own epoch, the same sequence as the
// sends') or after it. Thread 0 waits (acquire) for the send kernel's count matrix of this call; the blocks
// fill the outputs' rows past the received ones (topkIdx -1, weights 0, srcIdx -1) and block 0 writes the
// rank prefix; then block j takes the records [s][b] (every source s, every send block b) numbered j, j +
// gridDim.x, ...: thread 0 waits for the record's flag, fences (acquire: the sender fenced before writing
// it), and the block's warps copy its rows out while later records are still arriving.
__global__ void __launch_bounds__(kThreads, 1)
    dispatchReceiveKernel(KernelView v, DispatchOutputs out, Shape shape, int sendBlocks) {
  const int R = v.size, me = v.rank, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint64_t e = beginEpoch(v.receiveEpoch, v.receiveStarted);
  const uint32_t flag = flagOf(e);
  __shared__ bool ok;
  __shared__ uint32_t range[2];
  if (threadIdx.x == 0) ok = awaitCount(v.countsEpoch, e, v.spin[me], DeviceOp::EpDispatchWait);
  __syncthreads();
  const RowLayout rl = RowLayout::of(shape);
  const int64_t capacity = static_cast<int64_t>(v.layout.rowsBytes / rl.stride);
  const int64_t received = ok ? *v.receivedRows : 0;
  const bool proceed = ok && received <= capacity && received <= out.capacityRows;
  if (ok && !proceed && blockIdx.x == 0 && threadIdx.x == 0)
    device::reportTimeout(v.spin[me], DeviceOp::EpOverflow, received, std::min(capacity, out.capacityRows),
                          0);
  if (proceed) {
    if (blockIdx.x == 0) {
      for (int i = threadIdx.x; i < R * R; i += blockDim.x) {
        const int src = i / R, dst = i % R;
        int sum = 0;
        for (int s = 0; s <= src; ++s) sum += v.matrix[s * (R + 1) + dst];
        out.rankPrefix[i] = sum;
      }
      if (threadIdx.x == 0 && out.receivedRows) *out.receivedRows = static_cast<int>(received);
    }
    const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
    for (int64_t i = received + blockIdx.x * kWarps + warp; i < out.capacityRows; i += warps) {
      for (int k = lane; k < shape.topk; k += 32) {
        if (out.topkIdx) out.topkIdx[i * shape.topk + k] = -1;
        if (out.topkWeights) out.topkWeights[i * shape.topk + k] = 0.0f;
      }
      if (lane == 0 && out.srcIdx) out.srcIdx[i] = -1;
    }
    const auto* records = reinterpret_cast<const LL16Packet*>(v.regions[me] + v.layout.records);
    for (int k = blockIdx.x; k < R * sendBlocks; k += gridDim.x) {
      const int s = k / sendBlocks, b = k % sendBlocks;
      __syncthreads();  // the previous record's range is no longer read
      if (threadIdx.x == 0) {
        uint32_t vals[2] = {0, 0};
        const bool arrived = device::awaitPacket(records, s * kMaxSendBlocks + b, flag, v.spin[s], vals) ==
                             device::PacketWait::Arrived;
        device::fenceAcqRelSys();
        range[0] = arrived ? vals[0] : 0;
        range[1] = arrived ? vals[1] : 0;
      }
      __syncthreads();
      for (int64_t i = static_cast<int64_t>(range[0]) + warp; i < static_cast<int64_t>(range[1]); i += kWarps)
        if (i < received) copyReceivedRow(v, out, shape, rl, i, lane);
    }
  }
  endEpoch(e, v.receiveEpoch, v.receiveStarted);
}

// ---- combine -------------------------------------------------------------------------------------------

// Acquire wait until the u64 flag at `p` (this rank's memory, stored by a peer with release) holds `e`.
__device__ bool awaitFlag(const uint64_t* p, uint64_t e, const SpinContext& ctx) {
  return device::spinUntil(
      [&](uint64_t& seen) {
        seen = device::loadAcquireSys(p);
        return seen == e;
      },
      ctx, DeviceOp::EpCombineWait, e);
}

// Warps of a combine block that send; the others reduce (half and half measured best: with 4 or 12 of the
// 16 sending, the combine took 1.6-1.7x as long on 4x H100).
constexpr int kCombineSendWarps = kWarps / 2;
static_assert(kCombineSendWarps >= kMaxRanks, "every source needs a send warp even with one block");

// Rows a combine send warp writes before it publishes their flags with one system-scope fence.
constexpr int kCombineRowsPerRelease = 4;

// Send warp w (of all blocks' send warps): the rows received from source w % R, in order (token order), each
// into the source's slab for this rank at the row's token index (weak stores); after every
// kCombineRowsPerRelease rows, __syncwarp, then one lane's fence.acq_rel.sys and the rows' flags = epoch
// (relaxed stores after the fence: a release of every lane's rows).
__device__ void combineSend(const KernelView& v, const CombineInputs& in, const Shape& shape, uint64_t e,
                            int64_t slabTokens, int w) {
  const int R = v.size, me = v.rank, lane = threadIdx.x % 32;
  const SlabLayout sl = SlabLayout::of(shape);
  const int all = static_cast<int>(gridDim.x) * kCombineSendWarps;  // >= R: kCombineSendWarps >= kMaxRanks
  const int s = w % R, step = (all - s + R - 1) / R;
  // Rows past the received ones (a dispatch sized by num_worst_tokens) carry nothing back.
  const int64_t received =
      min(static_cast<int64_t>(in.rows), static_cast<int64_t>(in.rankPrefix[(R - 1) * R + me]));
  const int64_t lo = s == 0 ? 0 : in.rankPrefix[(s - 1) * R + me];
  const int64_t hi = min(received, static_cast<int64_t>(in.rankPrefix[s * R + me]));
  char* slab = v.regions[s] + v.layout.slabs + static_cast<uint64_t>(me) * slabTokens * sl.stride;
  for (int64_t first = lo + w / R; first < hi; first += static_cast<int64_t>(kCombineRowsPerRelease) * step) {
    uint64_t* flags[kCombineRowsPerRelease];
#pragma unroll
    for (int b = 0; b < kCombineRowsPerRelease; ++b) {
      const int64_t i = first + static_cast<int64_t>(b) * step;
      flags[b] = nullptr;
      if (i >= hi) continue;
      const int64_t t = in.srcIdx[i];
      if (t < 0 || t >= slabTokens) {
        if (lane == 0) device::reportTimeout(v.spin[s], DeviceOp::EpOverflow, t + 1, slabTokens, 0);
        return;
      }
      char* dst = slab + static_cast<uint64_t>(t) * sl.stride;
      device::copy(dst, static_cast<const char*>(in.y) + i * shape.hiddenBytes, shape.hiddenBytes, lane, 32);
      for (int k = lane; k < shape.topk; k += 32)
        reinterpret_cast<float*>(dst + sl.weights)[k] =
            in.topkWeights ? in.topkWeights[i * shape.topk + k] : 0.0f;
      flags[b] = reinterpret_cast<uint64_t*>(dst + sl.flag);
    }
    __syncwarp();
    if (lane == 0) {
      device::fenceAcqRelSys();
#pragma unroll
      for (int b = 0; b < kCombineRowsPerRelease; ++b)
        if (flags[b]) device::storeRelaxedSys(flags[b], e);
    }
  }
}

// Reduce warp w (of all blocks' reduce warps): tokens w, w + all, ...; each waits (acquire, every lane) for
// the flags of the ranks it went to, then sums their rows (fp32, loads of every rank in flight at once) and
// the biases into the output, and the ranks' weights.
__device__ void combineReduce(const KernelView& v, const CombineInputs& in, const Shape& shape,
                              const CombineOutputs& out, uint64_t e, int64_t slabTokens, int64_t w) {
  const int R = v.size, lane = threadIdx.x % 32;
  const SlabLayout sl = SlabLayout::of(shape);
  const char* slabs = v.regions[v.rank] + v.layout.slabs;
  const int elems = shape.hiddenBytes / 2;  // bf16
  const int64_t all = static_cast<int64_t>(gridDim.x) * (kWarps - kCombineSendWarps);
  for (int64_t t = w; t < in.tokens; t += all) {
    const uint32_t ranks = __ballot_sync(0xffffffffu, lane < R && in.tokenInRank[t * R + lane]);
    const char* row[kMaxRanks];
#pragma unroll
    for (int r = 0; r < kMaxRanks; ++r) {
      row[r] = slabs + (static_cast<uint64_t>(r) * slabTokens + t) * sl.stride;
      if (((ranks >> r) & 1u) &&
          !awaitFlag(reinterpret_cast<const uint64_t*>(row[r] + sl.flag), e, v.spin[r]))
        return;
    }
    for (int h = lane * 8; h < elems; h += 32 * 8) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const void* biases[2] = {in.bias0, in.bias1};
      for (const void* bias : biases) {
        if (!bias) continue;
        const auto* b = reinterpret_cast<const __nv_bfloat16*>(bias) + t * elems + h;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += __bfloat162float(b[j]);
      }
      uint4 packed[kMaxRanks];
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r)
        if ((ranks >> r) & 1u) packed[r] = *reinterpret_cast<const uint4*>(row[r] + 2 * h);
#pragma unroll
      for (int r = 0; r < kMaxRanks; ++r) {
        if (!((ranks >> r) & 1u)) continue;
        const auto* vals = reinterpret_cast<const __nv_bfloat16*>(&packed[r]);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += __bfloat162float(vals[j]);
      }
      uint4 result;
      auto* o = reinterpret_cast<__nv_bfloat16*>(&result);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = __float2bfloat16(acc[j]);
      *reinterpret_cast<uint4*>(reinterpret_cast<__nv_bfloat16*>(out.x) + t * elems + h) = result;
    }
    if (out.topkWeights) {
      for (int k = lane; k < shape.topk; k += 32) {
        float sum = 0.0f;
        for (int r = 0; r < R; ++r)
          if ((ranks >> r) & 1u) sum += reinterpret_cast<const float*>(row[r] + sl.weights)[k];
        out.topkWeights[t * shape.topk + k] = sum;
      }
    }
  }
}

// Sends and reduces at once (combineSend, combineReduce). First block 0 tells every source it may write into
// this rank's slabs (an LL packet, flag: the epoch; this rank's previous combine, reductions included, has
// finished), and every block waits for its destinations' packets. Slab rows are written once per call, so no
// send waits on a reduction; a reduction waits only on sends, which every rank's resident blocks make.
__global__ void __launch_bounds__(kThreads, 1)
    combineKernel(KernelView v, CombineInputs in, Shape shape, CombineOutputs out) {
  const int R = v.size, me = v.rank, warp = threadIdx.x / 32;
  const uint64_t e = beginEpoch(v.combineEpoch, v.combineStarted);
  const uint32_t flag = flagOf(e);
  const SlabLayout sl = SlabLayout::of(shape);
  const int64_t slabTokens =
      static_cast<int64_t>(v.layout.slabsBytes / (static_cast<uint64_t>(R) * sl.stride));
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = true;
  if (blockIdx.x == 0 && threadIdx.x < R) {
    reinterpret_cast<LL16Packet*>(v.regions[threadIdx.x] + v.layout.ready)[me].write(0, 0, flag);
  }
  __syncthreads();
  if (threadIdx.x < R) {
    const auto* ready = reinterpret_cast<const LL16Packet*>(v.regions[me] + v.layout.ready);
    uint32_t vals[2];
    if (device::awaitPacket(ready, threadIdx.x, flag, v.spin[threadIdx.x], vals) !=
        device::PacketWait::Arrived)
      ok = false;
  }
  __syncthreads();

  if (warp < kCombineSendWarps) {
    if (ok) combineSend(v, in, shape, e, slabTokens, static_cast<int>(blockIdx.x) * kCombineSendWarps + warp);
  } else {
    combineReduce(v, in, shape, out, e, slabTokens,
                  static_cast<int64_t>(blockIdx.x) * (kWarps - kCombineSendWarps) + warp - kCombineSendWarps);
  }
  endEpoch(e, v.combineEpoch, v.combineStarted);
}

// One thread: the epoch advances by `calls` and the started count with it (beginEpoch/endEpoch's invariant:
// started = epoch * blocks between calls). Stream-ordered with the kernels that use the counters.
__global__ void skipEpochsKernel(uint64_t* epoch, uint64_t* started, uint64_t calls, uint64_t blocks) {
  *epoch += calls;
  *started += calls * blocks;
}

}  // namespace

void launchSkipEpochs(uint64_t* epoch, uint64_t* started, uint64_t calls, int blocks, cudaStream_t stream) {
  skipEpochsKernel<<<1, 1, 0, stream>>>(epoch, started, calls, static_cast<uint64_t>(blocks));
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchLayout(const int64_t* topkIdx, int tokens, const Shape& shape, int ranks, const SpinContext& spin,
                  const LayoutOutputs& out, cudaStream_t stream) {
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(out.tokensPerRank, 0, sizeof(int) * ranks, stream));
  MESHCOMM_CUDA_CHECK(cudaMemsetAsync(out.tokensPerExpert, 0, sizeof(int) * shape.numExperts, stream));
  if (tokens == 0) return;
  const int threads = 256;
  layoutKernel<<<(tokens + threads - 1) / threads, threads, 0, stream>>>(
      topkIdx, tokens, shape.topk, shape.numExperts, ranks, spin, out.tokensPerRank, out.tokensPerExpert,
      out.tokenInRank);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchDispatchSend(const KernelView& v, const DispatchInputs& in, const Shape& shape,
                        cudaStream_t stream) {
  dispatchSendKernel<<<v.blocks - v.receiveBlocks, kThreads, 0, stream>>>(v, in, shape);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchDispatchReceive(const KernelView& v, const DispatchOutputs& out, const Shape& shape,
                           cudaStream_t stream) {
  dispatchReceiveKernel<<<v.receiveBlocks, kThreads, 0, stream>>>(v, out, shape, v.blocks - v.receiveBlocks);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchCombine(const KernelView& v, const CombineInputs& in, const Shape& shape,
                   const CombineOutputs& out, cudaStream_t stream) {
  combineKernel<<<v.blocks, kThreads, 0, stream>>>(v, in, shape, out);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::ep::kernels
