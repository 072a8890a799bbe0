// The low-latency kernels (docs/ep.md, "Low-latency mode"). Every launch has the LowLatencyBuffer's fixed
// number of blocks, all resident.
//
// Memory order. Messages and rows are weak stores into the peer's region; each writer then fences at system
// scope and one thread publishes with a release store (a count word or a ready word carrying the epoch); the
// reader acquires that word before any plain load of the data. A receiver, after the last block's reads of a
// half, stores the call's epoch as a credit into every peer's region; a sender acquires the credit for the
// half it is about to reuse (epoch - 2) before writing into it.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ep/ep_epoch.cuh"
#include "ep/low_latency_kernels.cuh"
#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/errors.hpp"
#include "base/kernel_modules.hpp"

namespace meshcomm::ep::ll {

namespace {

constexpr int kWarps = kThreads / 32;
constexpr float kFp8Max = 448.0f;
constexpr float kFp8MaxInv = 1.0f / 448.0f;
constexpr float kAmaxFloor = 1e-4f;
constexpr int kLoadsInFlight = 8;  // loads a lane issues before using the first (combine receive, FP8 cast)
// 16-byte loads a lane issues before its first store when a warp copies one row.
constexpr int kRowLoadsInFlight = 16;
constexpr int kChunkTokens = 128;  // tokens whose top-k a dispatch send block holds in shared memory at once
constexpr int kMaxTopk = 32;       // LowLatencyShape::topk's bound

__device__ __forceinline__ uint64_t* word(char* region, uint64_t offset, int index) {
  return reinterpret_cast<uint64_t*>(region + offset) + index;
}

// Acquire-waits until `pred(value)`; false on timeout or abort (reported through ctx). Adds the cycles waited
// to `cost` when given.
template <typename Pred>
__device__ bool awaitWord(const uint64_t* p, Pred pred, const SpinContext& ctx, DeviceOp op,
                          uint64_t expected, uint64_t& value, int64_t* cost) {
  const long long start = clock64();
  const bool ok = device::spinUntil(
      [&](uint64_t& seen) {
        seen = device::loadAcquireSys(p);
        value = seen;
        return pred(seen);
      },
      ctx, op, expected);
  if (cost)
    atomicAdd(reinterpret_cast<unsigned long long*>(cost),
              static_cast<unsigned long long>(clock64() - start));
  return ok;
}

// Waits for `peer`'s credit: it has finished reading the half this epoch reuses (that of epoch - 2).
__device__ bool awaitCredit(const LowLatencyView& v, uint64_t credits, int peer, uint64_t e, DeviceOp op) {
  if (e <= 2) return true;
  uint64_t seen = 0;
  return awaitWord(
      word(v.regions[v.rank], credits, static_cast<int>(e & 1) * kMaxRanks + peer),
      [&](uint64_t c) { return device::reached(c, e - 2); }, v.spin[peer], op, e - 2, seen, nullptr);
}

// Block-wide: every peer's credit for the half this epoch reuses (threads < R wait, one peer each); true for
// the whole block only when all arrived.
__device__ bool awaitAllCredits(const LowLatencyView& v, uint64_t credits, uint64_t e, DeviceOp op) {
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = true;
  __syncthreads();
  if (threadIdx.x < v.size && !awaitCredit(v, credits, threadIdx.x, e, op)) ok = false;
  __syncthreads();
  return ok;
}

// Block-wide: counts this block on `counter` (which runs on over launches of one grid size) after a system
// fence by thread 0 over the block's earlier accesses; true in every thread of the launch's last block to
// arrive.
__device__ bool lastBlockToArrive(uint64_t* counter) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    last = (atomicAdd(reinterpret_cast<unsigned long long*>(counter), 1ull) + 1) % gridDim.x == 0;
  }
  __syncthreads();
  return last;
}

// The last block to finish a receive phase stores the credit `e` for its half into every peer's region (the
// receives of the two halves may run in either order, even concurrently: each half counts its own blocks).
__device__ void finishReceive(const LowLatencyView& v, int op, uint64_t credits, uint64_t e) {
  // this block's reads of the half are done before it counts itself
  if (lastBlockToArrive(v.receivesDone + 2 * op + (e & 1)) && threadIdx.x < v.size) {
    __threadfence_system();
    device::storeReleaseSys(
        word(v.regions[threadIdx.x], credits, static_cast<int>(e & 1) * kMaxRanks + v.rank), e);
  }
}

// Block-wide, warp 0: begin[el] = rows(0) + ... + rows(el - 1) for el <= El (begin[El]: the total). The
// caller syncs the block before reading begin.
template <typename Rows>
__device__ void expertPrefix(int El, Rows rows, int32_t* begin) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x, per = (El + 31) / 32, first = lane * per;
  int mine = 0;
  for (int el = first; el < min(El, first + per); ++el) mine += rows(el);
  int upTo = mine;  // inclusive prefix over the lanes
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, upTo, o);
    if (lane >= o) upTo += other;
  }
  int at = upTo - mine;
  for (int el = first; el < min(El, first + per); ++el) {
    begin[el] = at;
    at += rows(el);
  }
  if (lane == 31) begin[El] = upTo;
}

// The expert whose rows hold global row g: the last el with begin[el] <= g (begin from expertPrefix).
__device__ __forceinline__ int expertOf(const int32_t* begin, int El, int g) {
  int lo = 0, hi = El - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (begin[mid] <= g) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__device__ __forceinline__ int sourceSum(const int32_t* counts, int R) {
  int n = 0;
  for (int j = 0; j < R; ++j) n += counts[j];
  return n;
}

// ceil(log2(x)) of a positive normal float, exactly (from its bits), and 2^e as a float (|e| < 127).
__device__ __forceinline__ int ceilLog2(float x) {
  const uint32_t bits = __float_as_uint(x);
  return static_cast<int>((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
}
__device__ __forceinline__ float exactPow2(int e) {
  return __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
}

// One token's FP8 message payload, written by a warp: per 128 channels (16 lanes x 8) the amax, the scale,
// the e4m3 values (saturating), then the scale's inverse at payload + H + 4 * group. The arithmetic is
// DeepEP's: scale = 448 / amax and scaleInv = amax * (1 / 448), or with roundScale the powers of two around
// ceil(log2(amax / 448)), so both produce the same bits.
__device__ void castToFp8(const __nv_bfloat16* x, char* payload, int hidden, bool roundScale, int lane) {
  constexpr int kGroupsInFlight = kLoadsInFlight / 2;  // per half-warp: its loads are issued together
  const int groups = hidden / 128;
  for (int g0 = 0; g0 < groups; g0 += 2 * kGroupsInFlight) {
    float vals[kGroupsInFlight][8];
    float amax[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int g = g0 + 2 * u + lane / 16;
      uint4 packed = make_uint4(0, 0, 0, 0);
      if (g < groups) packed = *reinterpret_cast<const uint4*>(x + g * 128 + (lane % 16) * 8);
      const auto* b = reinterpret_cast<const __nv_bfloat16*>(&packed);
      amax[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        vals[u][j] = __bfloat162float(b[j]);
        amax[u] = fmaxf(amax[u], fabsf(vals[u][j]));
      }
    }
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xffffffffu, amax[u], o));
    }
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int g = g0 + 2 * u + lane / 16;
      if (g >= groups) continue;
      const float m = fmaxf(amax[u], kAmaxFloor);
      float scale, scaleInv;
      if (roundScale) {
        const int e = ceilLog2(m * kFp8MaxInv);
        scaleInv = exactPow2(e);
        scale = exactPow2(-e);
      } else {
        scaleInv = m * kFp8MaxInv;
        scale = kFp8Max / m;
      }
      uint2 out;
      auto* o = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        o[j] = __nv_cvt_float2_to_fp8x2(make_float2(vals[u][2 * j] * scale, vals[u][2 * j + 1] * scale),
                                        __NV_SATFINITE, __NV_E4M3);
      }
      *reinterpret_cast<uint2*>(payload + g * 128 + (lane % 16) * 8) = out;
      if (lane % 16 == 0) reinterpret_cast<float*>(payload + hidden)[g] = scaleInv;
    }
  }
}

__device__ __forceinline__ uint32_t ue8m0Of(float scaleInv) {
  return (__float_as_uint(scaleInv) >> 23) & 0xffu;
}

}  // namespace

// Send: block b owns the experts b, b + B, b + 2B, ... (B blocks), taken kWarps at a time. Per chunk of
// tokens the block holds their top-k in shared memory; warp w lists, in token order, the tokens that chose
// expert w of the group (a ballot per 32 tokens), then all warps of the block share the group's messages:
// message i of an expert goes to slot n of [el][me] in the expert's rank. After the last chunk the block
// publishes each expert's epoch << 32 | n. Receive: every block acquires all El x R count words; the grid's
// warps then copy the rows of all local experts, a warp per row, into DeepEP's layouts.
__global__ void __launch_bounds__(kThreads, 1)
    dispatch(LowLatencyView v, LowLatencyDispatchArgs a, LowLatencyShape s, int phase) {
  const int R = v.size, me = v.rank, El = s.numExperts / R, M = s.maxTokens, H = s.hidden, K = s.topk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const LowLatencyLayout& L = v.layout;
  uint64_t e;
  if (phase & kLowLatencySend) {
    e = beginEpoch(v.dispatchEpoch, v.dispatchStarted);
    if (blockIdx.x == 0 && threadIdx.x == 0) v.pending[v.slot] = e;
    const uint64_t half = e & 1;
    __shared__ int16_t chosen[kChunkTokens * kMaxTopk];  // the chunk's top-k, -1 for none
    __shared__ int32_t listed[kWarps][kChunkTokens];     // per expert of the group: its tokens, in order
    __shared__ int32_t count[kWarps], sent[kWarps];      // this chunk's tokens, all chunks' before it
    const bool ok = awaitAllCredits(v, L.dispatchCredits, e, DeviceOp::EpDispatchWait);
    const int B = gridDim.x;
    for (int first = blockIdx.x; first < s.numExperts; first += kWarps * B) {
      const int ex = first + warp * B;  // this warp's expert of the group (none when >= E)
      if (lane == 0) sent[warp] = 0;
      for (int c0 = 0; ok && c0 < a.tokens; c0 += kChunkTokens) {
        const int ct = min(kChunkTokens, a.tokens - c0);
        __syncthreads();  // the previous chunk's lists are consumed
        for (int i = threadIdx.x; i < ct * K; i += blockDim.x) {
          const int64_t idx = a.topkIdx[static_cast<int64_t>(c0) * K + i];
          const bool valid = idx >= -1 && idx < s.numExperts;
          if (!valid && blockIdx.x == 0 && first == 0)
            device::reportTimeout(v.spin[me], DeviceOp::EpBadExpert, s.numExperts, static_cast<uint64_t>(idx),
                                  0);
          chosen[i] = valid ? static_cast<int16_t>(idx) : int16_t{-1};
        }
        __syncthreads();
        int n = 0;
        for (int tb = 0; ex < s.numExperts && tb < ct; tb += 32) {
          const int t = tb + lane;
          bool selected = false;
          for (int k = 0; t < ct && k < K; ++k) selected |= chosen[t * K + k] == ex;
          const uint32_t mask = __ballot_sync(0xffffffffu, selected);
          if (selected) listed[warp][n + __popc(mask & ((1u << lane) - 1))] = c0 + t;
          n += __popc(mask);
        }
        if (lane == 0) count[warp] = n;
        __syncthreads();
        // The group's messages, numbered expert by expert; each warp takes every kWarps-th.
        const int mine = lane < kWarps ? count[lane] : 0;
        int upTo = mine;  // inclusive prefix over the group's experts
#pragma unroll
        for (int o = 1; o < kWarps; o <<= 1) {
          const int other = __shfl_up_sync(0xffffffffu, upTo, o);
          if (lane >= o) upTo += other;
        }
        const int total = __shfl_sync(0xffffffffu, upTo, kWarps - 1);
        for (int m = warp; m < total; m += kWarps) {
          const int w = __popc(__ballot_sync(0xffffffffu, lane < kWarps && upTo <= m));
          const int before = __shfl_sync(0xffffffffu, upTo - mine, w);
          const int token = listed[w][m - before];
          const int gex = first + w * B, d = gex / El, el = gex % El;
          char* msg = v.regions[d] + L.messages + half * L.messagesHalf +
                      ((static_cast<uint64_t>(el) * R + me) * M + sent[w] + (m - before)) * L.messageStride;
          if (lane == 0) *reinterpret_cast<int32_t*>(msg) = token;
          const auto* row = static_cast<const __nv_bfloat16*>(a.x) + static_cast<int64_t>(token) * H;
          if (a.fp8) {
            castToFp8(row, msg + 16, H, a.roundScale, lane);
          } else {
            device::copy<kRowLoadsInFlight>(msg + 16, row, 2ull * H, lane, 32);
          }
        }
        __syncthreads();  // every warp has read sent[] of this chunk
        if (lane == 0) sent[warp] += n;
      }
      __threadfence_system();
      __syncthreads();
      if (lane == 0 && ex < s.numExperts && ok) {
        const int d = ex / El, el = ex % El;
        device::storeReleaseSys(
            word(v.regions[d], L.dispatchCounts, static_cast<int>(half) * kMaxExperts + el * R + me),
            (e << 32) | static_cast<uint32_t>(sent[warp]));
      }
    }
    endEpoch(e, v.dispatchEpoch, v.dispatchStarted);
    if (!(phase & kLowLatencyReceive)) return;
  } else {
    e = v.pending[v.slot];
  }

  // Receive (in the same launch as the send with kLowLatencyBoth: every block is resident). Every block
  // acquires all El x R count words; the rows of all local experts are then spread over the grid's warps.
  const uint64_t half = e & 1;
  const int64_t RM = static_cast<int64_t>(R) * M;
  __shared__ int32_t count[kMaxExperts];      // [el * R + j]: rows from source j for local expert el
  __shared__ int32_t begin[kMaxExperts + 1];  // rows of the local experts before el (begin[El]: all)
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = true;
  __syncthreads();
  const uint32_t tag = static_cast<uint32_t>(e);
  for (int w = threadIdx.x; w < El * R; w += blockDim.x) {
    const int el = w / R, j = w % R;
    const bool reportsCost = a.waitRecvCostStats && el % gridDim.x == blockIdx.x;  // one block per word
    uint64_t value = 0;
    if (!awaitWord(
            word(v.regions[me], L.dispatchCounts, static_cast<int>(half) * kMaxExperts + w),
            [&](uint64_t c) { return static_cast<uint32_t>(c >> 32) == tag; }, v.spin[j],
            DeviceOp::EpDispatchWait, e, value, reportsCost ? a.waitRecvCostStats + j : nullptr)) {
      ok = false;
      value = 0;
    }
    count[w] = static_cast<int32_t>(value & 0xffffffffu);
  }
  __syncthreads();
  expertPrefix(
      El, [&](int el) { return sourceSum(count + el * R, R); }, begin);
  __syncthreads();
  for (int el = blockIdx.x * blockDim.x + threadIdx.x; el < El; el += gridDim.x * blockDim.x) {
    const int rows = begin[el + 1] - begin[el];
    a.recvCount[el] = rows;
    if (a.cumulativeRecvStats) a.cumulativeRecvStats[el] += rows;
    int before = 0;
    for (int j = 0; j < R; ++j) {
      a.layoutRange[el * R + j] =
          (static_cast<int64_t>(before) << 32) | static_cast<int64_t>(count[el * R + j]);
      before += count[el * R + j];
    }
  }
  const int total = ok ? begin[El] : 0;
  for (int g = blockIdx.x * kWarps + warp; g < total; g += gridDim.x * kWarps) {
    const int el = expertOf(begin, El, g), i = g - begin[el];  // row i of expert el
    int j = 0, slot = i;
    while (j < R - 1 && slot >= count[el * R + j]) slot -= count[el * R + j++];
    const char* msg = v.regions[me] + L.messages + half * L.messagesHalf +
                      ((static_cast<uint64_t>(el) * R + j) * M + slot) * L.messageStride;
    const int64_t row = el * RM + i;
    if (lane == 0) a.srcInfo[row] = *reinterpret_cast<const int32_t*>(msg);
    if (a.fp8) {
      device::copy<kRowLoadsInFlight>(static_cast<char*>(a.recvX) + row * H, msg + 16, H, lane, 32);
      const auto* scales = reinterpret_cast<const float*>(msg + 16 + H);
      const int groups = H / 128;
      if (a.ue8m0) {
        for (int q = lane; q < groups / 4; q += 32) {
          const uint32_t packed = ue8m0Of(scales[4 * q]) | ue8m0Of(scales[4 * q + 1]) << 8 |
                                  ue8m0Of(scales[4 * q + 2]) << 16 | ue8m0Of(scales[4 * q + 3]) << 24;
          static_cast<uint32_t*>(a.recvScales)[(static_cast<int64_t>(el) * (groups / 4) + q) * RM + i] =
              packed;
        }
      } else {
        for (int q = lane; q < groups; q += 32)
          static_cast<float*>(a.recvScales)[(static_cast<int64_t>(el) * groups + q) * RM + i] = scales[q];
      }
    } else {
      device::copy<kRowLoadsInFlight>(static_cast<char*>(a.recvX) + row * 2 * H, msg + 16, 2ull * H, lane,
                                      32);
    }
  }
  finishReceive(v, 0, L.dispatchCredits, e);
}

// Send: the grid's warps return the received rows of all local experts, a warp per row, to their source ranks
// at [global expert][token] in the source's half; the last block to finish publishes the epoch in every
// rank's ready word of each of this rank's experts. Receive: every block acquires the E ready words of this
// epoch; one warp per (token, slice of H) sums its top-k rows, weighted, in fp32. With both phases in one
// launch, a block that has sent goes on to receive.
__global__ void __launch_bounds__(kThreads, 1)
    combine(LowLatencyView v, LowLatencyCombineArgs a, LowLatencyShape s, int phase) {
  const int R = v.size, me = v.rank, El = s.numExperts / R, M = s.maxTokens, H = s.hidden;
  const int lane = threadIdx.x % 32;
  const LowLatencyLayout& L = v.layout;
  const uint64_t rowBytes = 2ull * H;
  uint64_t e;
  if (phase & kLowLatencySend) {
    e = beginEpoch(v.combineEpoch, v.combineStarted);
    if (blockIdx.x == 0 && threadIdx.x == 0) v.pending[2 + v.slot] = e;
    const uint64_t half = e & 1;
    const int64_t RM = static_cast<int64_t>(R) * M;
    const bool ok = awaitAllCredits(v, L.combineCredits, e, DeviceOp::EpCombineWait);
    // The rows of all local experts (layout_range's last entry per expert ends them) over the grid's warps.
    __shared__ int32_t begin[kMaxExperts + 1];
    expertPrefix(
        El,
        [&](int el) {
          const int64_t last = a.layoutRange[el * R + R - 1];
          return static_cast<int>((last >> 32) + (last & 0xffffffff));
        },
        begin);
    __syncthreads();
    const int total = ok ? begin[El] : 0;
    for (int g = blockIdx.x * kWarps + threadIdx.x / 32; g < total; g += gridDim.x * kWarps) {
      const int el = expertOf(begin, El, g), i = g - begin[el];  // row i of local expert el
      int j = 0;
      while (j < R - 1 && (a.layoutRange[el * R + j + 1] >> 32) <= i) ++j;
      const int32_t t = a.srcInfo[el * RM + i];
      if (t < 0 || t >= M) {
        if (lane == 0)
          device::reportTimeout(v.spin[j], DeviceOp::EpOverflow, static_cast<uint64_t>(t) + 1, M, 0);
        continue;
      }
      char* dst = v.regions[j] + L.rows + half * L.rowsHalf +
                  (static_cast<uint64_t>(me * El + el) * M + t) * rowBytes;
      device::copy<kRowLoadsInFlight>(dst, static_cast<const char*>(a.y) + (el * RM + i) * rowBytes, rowBytes,
                                      lane, 32);
    }
    // The last block to finish publishes the epoch in every rank's ready word of each of this rank's experts
    // (the other blocks' rows are ordered before it by their system fence and the count).
    __threadfence_system();
    if (lastBlockToArrive(v.combineSendsDone)) {
      __threadfence_system();
      for (int w = threadIdx.x; w < El * R; w += blockDim.x) {
        const int el = w / R, j = w % R;
        device::storeReleaseSys(
            word(v.regions[j], L.combineReady, static_cast<int>(half) * kMaxExperts + me * El + el), e);
      }
    }
    endEpoch(e, v.combineEpoch, v.combineStarted);
    if (!(phase & kLowLatencyReceive)) return;
  } else {
    e = v.pending[2 + v.slot];
  }

  // Receive (in the same launch as the send with kLowLatencyBoth: every block is resident).
  const uint64_t half = e & 1;
  __shared__ bool ready;
  if (threadIdx.x == 0) ready = true;
  __syncthreads();
  for (int ex = threadIdx.x; ex < s.numExperts; ex += blockDim.x) {
    uint64_t value = 0;
    const int owner = ex / El;
    if (!awaitWord(
            word(v.regions[me], L.combineReady, static_cast<int>(half) * kMaxExperts + ex),
            [&](uint64_t w) { return w == e; }, v.spin[owner], DeviceOp::EpCombineWait, e, value,
            a.waitRecvCostStats ? a.waitRecvCostStats + owner : nullptr))
      ready = false;
  }
  __syncthreads();
  const char* rowsHalf = v.regions[me] + L.rows + half * L.rowsHalf;
  // A warp sums one slice of a token's hidden dimension: the grid's warps are spread over tokens x slices.
  const int warps = gridDim.x * kWarps, spans = (H + 255) / 256;
  const int slices = a.tokens > 0 ? max(1, min(spans, warps / a.tokens)) : 1;
  const int spansPerSlice = (spans + slices - 1) / slices;
  for (int item = blockIdx.x * kWarps + threadIdx.x / 32; ready && item < a.tokens * slices; item += warps) {
    const int t = item / slices, h0 = (item % slices) * spansPerSlice * 256;
    const int h1 = min(H, h0 + spansPerSlice * 256);
    // Lane k holds the token's k-th expert and weight (-1: none); the rows' loads of up to kLoadsInFlight
    // experts are issued before any is summed.
    int64_t myEx = -1;
    float myW = 0.0f;
    if (lane < s.topk) {
      myEx = a.topkIdx[static_cast<int64_t>(t) * s.topk + lane];
      myW = a.topkWeights[static_cast<int64_t>(t) * s.topk + lane];
      if (myEx < 0 || myEx >= s.numExperts) myEx = -1;
    }
    const char* rowOf = rowsHalf + static_cast<uint64_t>(t) * rowBytes;  // + ex * M * rowBytes
    for (int h = h0 + lane * 8; h < h1; h += 32 * 8) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k0 = 0; k0 < s.topk; k0 += kLoadsInFlight) {
        uint4 packed[kLoadsInFlight];
        float w[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
          const int64_t ex = __shfl_sync(0xffffffffu, myEx, (k0 + j) & 31);
          w[j] = __shfl_sync(0xffffffffu, myW, (k0 + j) & 31);
          if (k0 + j < s.topk && ex >= 0) {
            packed[j] =
                *reinterpret_cast<const uint4*>(rowOf + static_cast<uint64_t>(ex) * M * rowBytes + 2ull * h);
          } else {
            packed[j] = make_uint4(0, 0, 0, 0);
            w[j] = 0.0f;
          }
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
          const auto* b = reinterpret_cast<const __nv_bfloat16*>(&packed[j]);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] += w[j] * __bfloat162float(b[i]);
        }
      }
      uint4 packed;
      auto* o = reinterpret_cast<__nv_bfloat16*>(&packed);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = __float2bfloat16(acc[j]);
      *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.out) + static_cast<int64_t>(t) * H + h) =
          packed;
    }
  }
  finishReceive(v, 1, L.combineCredits, e);
}

void launchDispatch(const LowLatencyView& v, const LowLatencyDispatchArgs& a, const LowLatencyShape& s,
                    int phase, int blocks, cudaStream_t stream) {
  dispatch<<<blocks, kThreads, 0, stream>>>(v, a, s, phase);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchCombine(const LowLatencyView& v, const LowLatencyCombineArgs& a, const LowLatencyShape& s,
                   int phase, int blocks, cudaStream_t stream) {
  combine<<<blocks, kThreads, 0, stream>>>(v, a, s, phase);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::ep::ll

MESHCOMM_KERNEL_MODULE()
