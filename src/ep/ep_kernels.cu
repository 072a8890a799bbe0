// EpBuffer's kernels (docs/ep.md): layout, dispatch send, dispatch receive, combine. The communicating
// kernels run `blocks` blocks of kThreads threads, all resident (the host checks blocks <= multiprocessors);
// each reads its call's epoch from a device counter, and block 0 advances the counter once every block has
// read it, so graph replays stay in step.
#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <utility>

#include "ep/ep_epoch.cuh"
#include "ep/ep_kernels.cuh"
#include "meshcomm/device/named_barrier.hpp"
#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/copy.hpp"
#include "meshcomm/errors.hpp"
#include "base/kernel_modules.hpp"

namespace meshcomm::ep::kernels {

namespace {

constexpr uint32_t traceCode(EpTraceEvent e) {
  return static_cast<uint32_t>(e);
}

// A trace event's call (ep_region.hpp, EpTraceEvent): the kernel's epoch and which kernel it is, so that the
// calls of the three kernels, each counting its own epochs, stay apart.
__device__ __forceinline__ uint32_t traceCall(EpTraceKernel k, uint64_t e) {
  return static_cast<uint32_t>(k) << 30 | (static_cast<uint32_t>(e) & 0x3fffffffu);
}

constexpr int kWarps = kThreads / 32;
// 16-byte loads a lane keeps in flight when it copies a row (a row of a 7168-wide BF16 token is 28 vectors a
// lane): enough bytes in flight per SM to cover a load's latency.
constexpr int kCopyUnroll = 8;
// The dispatch send kernel: worker warps that copy rows, one publisher warp that writes the records, and the
// named barriers (one per round, each used once a launch) between them.
constexpr int kSendWorkerWarps = 16;
constexpr int kSendThreads = (kSendWorkerWarps + 1) * 32;
constexpr int kRoundBarrier = 1;
static_assert(kRoundBarrier + kDispatchRounds <= 16, "a block has 16 named barriers");
static_assert(kSendWorkerWarps >= kMaxRanks, "every destination needs a worker warp");
// The dispatch receive kernel's threads, and the warps that share a record's rows (each awaits the record).
constexpr int kReceiveThreads = 1024;
constexpr int kRecordSlices = 8;
// Pause between two polls of a dispatch record: many warps wait for records at once, and their polls would
// otherwise compete with the arriving rows for the memory system.
constexpr unsigned kRecordPollPauseNs = 128;

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

// Counts one more stager (a block or a warp that has written its rows for a peer, ordered before this by the
// caller's barrier) on a device counter that reaches `all` when the call's last stager arrives; true for
// that last one, whose later FIFO push then covers every stager's rows (fence, add, fence at system scope:
// the rows are in host memory the proxy reads).
__device__ __forceinline__ bool lastToStage(uint64_t* counter, uint64_t all) {
  __threadfence_system();
  const bool last = atomicAdd(reinterpret_cast<unsigned long long*>(counter), 1ull) + 1 == all;
  __threadfence_system();
  return last;
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

// Tokens in [begin, end) that go to rank d (a warp reduction; every lane gets the sum).
__device__ int countIn(const bool* tokenInRank, int ranks, int d, int begin, int end) {
  int n = 0;
  for (int t = begin + threadIdx.x % 32; t < end; t += 32)
    n += tokenInRank[static_cast<int64_t>(t) * ranks + d] ? 1 : 0;
  for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
  return n;
}

// Block 0 of dispatchSend, across nodes: this rank's count row for each other node's rank d goes as plain
// words (written to the network region's countsOut[d], then __syncthreads: the FIFO push orders this block's
// writes) in one put with a signal into d's countsIn[me]; then thread d waits for d's signal (acquire: d's
// row to this rank has landed in countsIn[d]) and writes the row into this rank's count packets as LL packets
// with this call's flag, as a node peer would, so every block reads all rows alike. A row of this call from d
// also means d has started this call, so its earlier use of the areas this rank puts into is over.
__device__ void exchangeNetworkCounts(const KernelView& v, const DispatchInputs& in, int El, uint32_t flag) {
  const int R = v.size, me = v.rank, countWords = R + El + 1;
  for (int i = threadIdx.x; i < R * countWords; i += blockDim.x) {
    const int d = i / countWords, w = i % countWords;
    if (v.sameNode(d)) continue;
    reinterpret_cast<int32_t*>(v.network + v.netLayout.countsOut + d * kCountRecordBytes)[w] =
        countWord(in, R, El, d, w);
  }
  __syncthreads();
  const int d = threadIdx.x;
  if (d >= R || v.sameNode(d)) return;
  PortChannelDeviceHandle ch = v.net[d];
  ch.putWithSignal(v.netLayout.countsIn + me * kCountRecordBytes,
                   v.netLayout.countsOut + d * kCountRecordBytes, 4ull * countWords);
  if (!ch.wait()) return;
  const auto* row =
      reinterpret_cast<const int32_t*>(v.network + v.netLayout.countsIn + d * kCountRecordBytes);
  auto* packets = reinterpret_cast<LL16Packet*>(v.regions[me] + v.layout.counts + d * kCountPacketBytes);
  for (int p = 0; 2 * p < countWords; ++p)
    packets[p].write(row[2 * p], 2 * p + 1 < countWords ? row[2 * p + 1] : 0, flag);
}

// Phase 1 (counts): block 0 sends this rank's count row to every destination as LL packets (flag: the epoch);
// every block reads every source's row (acquire by flag) — a destination's row of this epoch also means it
// has finished with its region's previous rows (its receive of the previous call ran before, on its stream).
// Phase 2 (rows): each selected row is written with weak stores at its final place in the destination's
// region, round by round; after each round the publisher warp writes one record per node peer (below).
__global__ void __launch_bounds__(kSendThreads, 1)
    dispatchSendKernel(KernelView v, DispatchInputs in, Shape shape) {
  const int R = v.size, me = v.rank, El = shape.numExperts / R;
  const uint64_t e = beginEpoch(v.dispatchEpoch, v.dispatchStarted);
  if (threadIdx.x == 0)
    v.trace.record(traceCall(EpTraceKernel::DispatchSend, e), traceCode(EpTraceEvent::DispatchSendStart), 0);
  const uint32_t flag = llPacketFlag(e);
  const int countWords = R + El + 1;
  const int countPackets = (countWords + 1) / 2;
  __shared__ int32_t M[kMaxRanks][kMaxRanks + 1];  // M[s][d]: tokens s sends d; M[s][R]: s's tokens
  __shared__ int32_t offset[kMaxRanks], total[kMaxRanks], staged[kMaxRanks];
  __shared__ bool skip[kMaxRanks], stagingFull;

  if (blockIdx.x == 0) {
    for (int i = threadIdx.x; i < R * countPackets; i += blockDim.x) {
      const int d = i / countPackets, p = i % countPackets;
      if (!v.sameNode(d)) continue;
      auto* dst = reinterpret_cast<LL16Packet*>(v.regions[d] + v.layout.counts + me * kCountPacketBytes);
      dst[p].write(countWord(in, R, El, d, 2 * p), countWord(in, R, El, d, 2 * p + 1), flag);
    }
    if (v.net) exchangeNetworkCounts(v, in, El, flag);
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
    // Rows for other nodes' ranks are staged in this rank's dispatch staging, by destination.
    int before = 0;
    for (int q = 0; q < d; ++q) before += v.sameNode(q) ? 0 : M[me][q];
    staged[d] = before;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int64_t all = staged[R - 1] + (v.sameNode(R - 1) ? 0 : M[me][R - 1]);
    stagingFull = all * static_cast<int64_t>(rl.stride) > static_cast<int64_t>(v.netLayout.stagingBytes);
    // ... and the rows each remote destination receives from this rank must fit its network rows area.
    for (int q = 0; q < R; ++q)
      if (!v.sameNode(q) && (static_cast<int64_t>(offset[q]) + M[me][q]) * static_cast<int64_t>(rl.stride) >
                                static_cast<int64_t>(v.netLayout.rowsBytes))
        stagingFull = true;
    bool receiveTooLarge = false;  // reported above, and the more useful message
    for (int q = 0; q < R; ++q) receiveTooLarge |= skip[q];
    if (stagingFull && !receiveTooLarge && blockIdx.x == 0)
      device::reportTimeout(v.spin[me], DeviceOp::EpStagingOverflow, all,
                            static_cast<int64_t>(v.netLayout.stagingBytes / rl.stride), 0);
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

  // Phase 2: the block's token chunk goes in kDispatchRounds rounds. Worker warps by (destination d, part of
  // the round's tokens) copy the rows; `row` is where d's rows of the round start (d's dispatch rows, or this
  // rank's staging for another node's rank). Each worker arrives at the round's named barrier (release at
  // CTA scope) and goes on with the next round; the publisher warp syncs on it, then its lane d of a node
  // peer d fences at system scope (cumulative: a release of every worker's rows) and writes the round's row
  // range in d's rows as the record [me][block][round] — also when nothing was sent (an empty range, or a
  // skipped destination). The workers never wait for a record's fence.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunk = (in.tokens + gridDim.x - 1) / gridDim.x;
  const int begin = std::min(in.tokens, static_cast<int>(blockIdx.x) * chunk);
  const int end = std::min(in.tokens, begin + chunk);
  const int perRound = std::max(1, (end - begin + kDispatchRounds - 1) / kDispatchRounds);
  if (warp < kSendWorkerWarps) {
    const int parts = std::max(1, kSendWorkerWarps / R);
    const int d = warp % R, part = warp / R;
    const bool remote = !v.sameNode(d);
    const bool sends = part < parts && !skip[d] && !(remote && stagingFull);
    char* rows = remote ? v.network + v.netLayout.dispatchStaging : v.regions[d] + v.layout.rows;
    int row = (remote ? staged[d] : offset[d]) + countIn(in.tokenInRank, R, d, 0, begin);
    for (int round = 0; round < kDispatchRounds; ++round) {
      const int r0 = std::min(end, begin + round * perRound), r1 = std::min(end, r0 + perRound);
      if (sends) {
        const int sub = (r1 - r0 + parts - 1) / parts;
        const int t0 = std::min(r1, r0 + part * sub), t1 = std::min(r1, t0 + sub);
        int at = row + countIn(in.tokenInRank, R, d, r0, t0);
        for (int base = t0; base < t1; base += 32) {
          const int t = base + lane;
          const bool selected = t < t1 && in.tokenInRank[static_cast<int64_t>(t) * R + d];
          uint32_t mask = __ballot_sync(0xffffffffu, selected);
          while (mask) {
            const int bit = __ffs(mask) - 1;
            mask &= mask - 1;
            const int64_t token = base + bit;
            char* dst = rows + static_cast<uint64_t>(at) * rl.stride;
            device::copy<kCopyUnroll>(dst, static_cast<const char*>(in.x) + token * shape.hiddenBytes,
                                      shape.hiddenBytes, lane, 32);
            for (int k = lane; k < shape.topk; k += 32) {
              const int64_t idx = in.topkIdx[token * shape.topk + k];
              const bool local =
                  idx >= static_cast<int64_t>(d) * El && idx < static_cast<int64_t>(d + 1) * El;
              reinterpret_cast<int64_t*>(dst + rl.topkIdx)[k] =
                  local ? idx - static_cast<int64_t>(d) * El : -1;
              reinterpret_cast<float*>(dst + rl.weights)[k] =
                  local && in.topkWeights ? in.topkWeights[token * shape.topk + k] : 0.0f;
            }
            for (int c = lane; c < shape.scales; c += 32)
              reinterpret_cast<float*>(dst + rl.scales)[c] = in.scales[token * shape.scales + c];
            if (lane == 0) *reinterpret_cast<int32_t*>(dst + rl.srcIdx) = static_cast<int32_t>(token);
            ++at;
          }
        }
      }
      device::namedBarrierArrive(kRoundBarrier + round, kSendThreads);
      row += countIn(in.tokenInRank, R, d, r0, r1);
    }
  } else {
    // The publisher: lane q keeps node peer q's row where the next round starts.
    int row = 0;
    for (int q = 0; q < R; ++q) {
      const int n = countIn(in.tokenInRank, R, q, 0, begin);
      if (lane == q) row = offset[q] + n;
    }
    for (int round = 0; round < kDispatchRounds; ++round) {
      const int r0 = std::min(end, begin + round * perRound), r1 = std::min(end, r0 + perRound);
      int inRound = 0;
      for (int q = 0; q < R; ++q) {
        const int n = countIn(in.tokenInRank, R, q, r0, r1);
        if (lane == q) inRound = n;
      }
      device::namedBarrierSync(kRoundBarrier + round, kSendThreads);
      if (lane < R && v.sameNode(lane)) {
        const int last = skip[lane] ? row : row + inRound;
        __threadfence_system();
        reinterpret_cast<LL16Packet*>(
            v.regions[lane] + v.layout.records)[(me * kMaxSendBlocks + blockIdx.x) * kDispatchRounds + round]
            .write(static_cast<uint32_t>(row), static_cast<uint32_t>(last), flag);
      }
      row += inRound;
    }
  }
  __syncthreads();  // every worker's rows are staged before the puts below
  // Thread q of another node's rank q: once every block's rows for q are staged, the last block puts them to
  // their receive positions in q's network region, then signals (unless staging failed: q's wait then times
  // out rather than reading rows that were never sent). No flush: this rank rewrites the staging and its
  // count row only in its next dispatch, after q's count row of that call, which q sends after this call's
  // rows (read by the proxy before the signal) arrived.
  if (threadIdx.x < R && !v.sameNode(threadIdx.x) &&
      lastToStage(&v.netState->dispatchStaged[threadIdx.x], e * gridDim.x)) {
    const int q = threadIdx.x;
    PortChannelDeviceHandle ch = v.net[q];
    const uint64_t bytes = skip[q] ? 0 : static_cast<uint64_t>(M[me][q]) * rl.stride;
    if (!stagingFull) {
      if (bytes > 0)
        ch.put(v.netLayout.rows + static_cast<uint64_t>(offset[q]) * rl.stride,
               v.netLayout.dispatchStaging + static_cast<uint64_t>(staged[q]) * rl.stride, bytes);
      ch.signal();
    }
  }
  if (threadIdx.x == 0)
    v.trace.record(traceCall(EpTraceKernel::DispatchSend, e), traceCode(EpTraceEvent::DispatchSendEnd), 0);
  endEpoch(e, v.dispatchEpoch, v.dispatchStarted);
}

// Warp's copy of received row i into the outputs, from `rows` (this rank's dispatch rows, or its network
// region's for another node's source; plain loads after the caller's acquire).
__device__ void copyReceivedRow(const char* rows, const DispatchOutputs& out, const Shape& shape,
                                const RowLayout& rl, int64_t i, int lane) {
  const char* src = rows + static_cast<uint64_t>(i) * rl.stride;
  device::copy<kCopyUnroll>(static_cast<char*>(out.x) + i * shape.hiddenBytes, src, shape.hiddenBytes, lane,
                            32);
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
// rank prefix; then warp j of the grid takes the work items (record, slice) of the records [s][b][r] (every
// source s, send block b and round r, numbered round by round) and kRecordSlices slices, j, j + warps, ...:
// its lane 0 waits for the record's flag and fences (acquire: the sender fenced before writing it; __syncwarp
// passes it to the lanes), and the warp copies every kRecordSlices-th row of the record from its slice on,
// while later rounds are still being sent. A source s on another node has no records: its rows lie
// at their receive positions in this rank's network region once its put's signal arrived; the warp taking
// [s][0][last round] slice 0 awaits that signal and publishes the call's epoch in landed[s] (release), and
// the warps taking [s][b][last round] await landed[s] (acquire) and copy the b-th of sendBlocks equal parts.
__global__ void __launch_bounds__(kReceiveThreads, 1)
    dispatchReceiveKernel(KernelView v, DispatchOutputs out, Shape shape, int sendBlocks) {
  constexpr int kReceiveWarps = kReceiveThreads / 32;
  const int R = v.size, me = v.rank, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint64_t e = beginEpoch(v.receiveEpoch, v.receiveStarted);
  const uint32_t flag = llPacketFlag(e);
  __shared__ bool ok;
  if (threadIdx.x == 0) {
    v.trace.record(traceCall(EpTraceKernel::DispatchReceive, e), traceCode(EpTraceEvent::ReceiveStart), 0);
    ok = awaitCount(v.countsEpoch, e, v.spin[me], DeviceOp::EpDispatchWait);
    v.trace.record(traceCall(EpTraceKernel::DispatchReceive, e), traceCode(EpTraceEvent::ReceiveCounts), 0);
  }
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
    const int64_t warps = static_cast<int64_t>(gridDim.x) * kReceiveWarps;
    const int64_t gridWarp = static_cast<int64_t>(blockIdx.x) * kReceiveWarps + warp;
    for (int64_t i = received + gridWarp; i < out.capacityRows; i += warps) {
      for (int k = lane; k < shape.topk; k += 32) {
        if (out.topkIdx) out.topkIdx[i * shape.topk + k] = -1;
        if (out.topkWeights) out.topkWeights[i * shape.topk + k] = 0.0f;
      }
      if (lane == 0 && out.srcIdx) out.srcIdx[i] = -1;
    }
    const auto* records = reinterpret_cast<const LL16Packet*>(v.regions[me] + v.layout.records);
    const int perRound = R * sendBlocks;
    for (int64_t item = gridWarp; item < static_cast<int64_t>(kDispatchRounds) * perRound * kRecordSlices;
         item += warps) {
      const int64_t k = item / kRecordSlices;
      const int slice = static_cast<int>(item % kRecordSlices);
      const int round = static_cast<int>(k / perRound), s = static_cast<int>(k % perRound) / sendBlocks,
                b = static_cast<int>(k % sendBlocks);
      const bool remote = !v.sameNode(s);
      if (remote && round < kDispatchRounds - 1) continue;  // uniform across the warp
      uint32_t lo = 0, hi = 0;
      if (lane == 0) {
        bool arrived = false;
        if (remote) {
          if (b == 0 && slice == 0) {
            PortChannelDeviceHandle ch = v.net[s];
            arrived = ch.wait();
            if (arrived) device::storeReleaseSys(&v.netState->landed[s], e);
          } else {
            arrived = awaitCount(&v.netState->landed[s], e, v.spin[s], DeviceOp::EpDispatchWait);
          }
          int first = 0;
          for (int q = 0; q < s; ++q) first += v.matrix[q * (R + 1) + me];
          const int n = v.matrix[s * (R + 1) + me], part = (n + sendBlocks - 1) / sendBlocks;
          lo = static_cast<uint32_t>(first + std::min(n, b * part));
          hi = static_cast<uint32_t>(first + std::min(n, (b + 1) * part));
        } else {
          uint32_t vals[2] = {0, 0};
          arrived = device::awaitPacket(records, (s * kMaxSendBlocks + b) * kDispatchRounds + round, flag,
                                        v.spin[s], vals, device::EveryPacketSent{},
                                        kRecordPollPauseNs) == device::PacketWait::Arrived;
          device::fenceAcqRelSys();
          lo = vals[0];
          hi = vals[1];
        }
        if (!arrived) lo = hi = 0;
      }
      __syncwarp();
      lo = __shfl_sync(0xffffffffu, lo, 0);
      hi = __shfl_sync(0xffffffffu, hi, 0);
      const char* rows = remote ? v.network + v.netLayout.rows : v.regions[me] + v.layout.rows;
      for (int64_t i = lo + slice; i < static_cast<int64_t>(hi) && i < received; i += kRecordSlices)
        copyReceivedRow(rows, out, shape, rl, i, lane);
    }
  }
  if (v.trace.events != nullptr) {  // uniform: the block's last warp is done when the event is recorded
    __syncthreads();
    if (threadIdx.x == 0)
      v.trace.record(traceCall(EpTraceKernel::DispatchReceive, e), traceCode(EpTraceEvent::ReceiveEnd), 0);
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

// Chunks of a row a combine reduce lane loads from every one of kR ranks before it sums them: 16 loads of
// 16 bytes in flight a lane (64 registers) whatever the rank count.
template <int kR>
constexpr int kReduceChunks = kR >= 16 ? 1 : 16 / kR;

// 16-byte loads a combine send lane keeps in flight per row copy: twice kCopyUnroll, since only half of a
// block's warps send and most rows' stores go to a peer.
constexpr int kCombineCopyUnroll = 16;

// Rows a combine send warp writes before it publishes their flags with one system-scope fence.
constexpr int kCombineRowsPerRelease = 4;

// Rows this rank received from the sources before `s` that lie on other nodes (their rows precede s's in
// this rank's combine staging).
__device__ int64_t stagedBefore(const KernelView& v, const CombineInputs& in, int s, int64_t received) {
  const int R = v.size, me = v.rank;
  int64_t n = 0;
  for (int q = 0; q < s; ++q) {
    if (v.sameNode(q)) continue;
    const int64_t lo = q == 0 ? 0 : in.rankPrefix[(q - 1) * R + me];
    n += max(int64_t{0}, min(received, static_cast<int64_t>(in.rankPrefix[q * R + me])) - lo);
  }
  return n;
}

// A send warp's share of the rows for source s on another node (rows lo..hi of y, s's tokens in order): once
// s's ready signal has arrived (relayed by the network waiter; s sends it after its previous combine, which
// waited for this rank's previous rows, so the proxy has finished reading the staging), the `part`-th of
// every `parts` rows, copied with the weights into this rank's combine staging (s's rows after those of
// earlier remote sources). The warp that stages last puts the rows into s's slab for this rank (row k: s's
// k-th token sent here) and signals; no flush (the next writer of the staging waits as this one did).
__device__ void combineSendAcrossNodes(const KernelView& v, const CombineInputs& in, const Shape& shape,
                                       uint64_t e, int64_t slabTokens, int s, int parts, int part, int64_t lo,
                                       int64_t hi) {
  const int R = v.size, me = v.rank, lane = threadIdx.x % 32;
  const SlabLayout sl = SlabLayout::of(shape);
  const int64_t received =
      min(static_cast<int64_t>(in.rows), static_cast<int64_t>(in.rankPrefix[(R - 1) * R + me]));
  const int64_t first = stagedBefore(v, in, s, received);
  const int64_t rows = max(int64_t{0}, hi - lo);
  const int64_t networkSlabTokens =
      static_cast<int64_t>(v.netLayout.slabsBytes / (static_cast<uint64_t>(R) * sl.stride));
  if ((first + rows) * static_cast<int64_t>(sl.stride) > static_cast<int64_t>(v.netLayout.stagingBytes) ||
      rows > networkSlabTokens) {
    if (lane == 0 && part == 0)
      device::reportTimeout(v.spin[me], DeviceOp::EpStagingOverflow, first + rows,
                            static_cast<int64_t>(v.netLayout.stagingBytes / sl.stride), 0);
    return;  // s's wait for these rows times out: nothing is sent
  }
  const bool ready =
      lane != 0 || awaitCount(&v.netState->combineReady[s], e, v.spin[s], DeviceOp::EpCombineWait);
  if (!__all_sync(0xffffffffu, ready)) return;  // timed out (reported): nothing is sent
  __syncwarp();                                 // lane 0's acquire orders every lane's staging writes below
  char* staging = v.network + v.netLayout.combineStaging + static_cast<uint64_t>(first) * sl.stride;
  for (int64_t i = lo + part; i < hi; i += parts) {
    char* dst = staging + static_cast<uint64_t>(i - lo) * sl.stride;
    device::copy(dst, static_cast<const char*>(in.y) + i * shape.hiddenBytes, shape.hiddenBytes, lane, 32);
    for (int k = lane; k < shape.topk; k += 32)
      reinterpret_cast<float*>(dst + sl.weights)[k] =
          in.topkWeights ? in.topkWeights[i * shape.topk + k] : 0.0f;
  }
  __syncwarp();
  if (lane != 0 || !lastToStage(&v.netState->combineStaged[s], e * parts)) return;
  PortChannelDeviceHandle ch = v.net[s];
  if (rows > 0)
    ch.put(v.netLayout.slabs + static_cast<uint64_t>(me) * networkSlabTokens * sl.stride,
           v.netLayout.combineStaging + static_cast<uint64_t>(first) * sl.stride,
           static_cast<uint64_t>(rows) * sl.stride);
  ch.signal();
}

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
  if (!v.sameNode(s)) {
    combineSendAcrossNodes(v, in, shape, e, slabTokens, s, step, w / R, lo, hi);
    return;
  }
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
      device::copy<kCombineCopyUnroll>(dst, static_cast<const char*>(in.y) + i * shape.hiddenBytes,
                                       shape.hiddenBytes, lane, 32);
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
template <int kR>
__device__ void combineReduce(const KernelView& v, const CombineInputs& in, const Shape& shape,
                              const CombineOutputs& out, uint64_t e, int64_t slabTokens, int64_t w) {
  constexpr int R = kR;
  const int lane = threadIdx.x % 32;
  const SlabLayout sl = SlabLayout::of(shape);
  const char* slabs = v.regions[v.rank] + v.layout.slabs;
  const int64_t networkSlabTokens =
      static_cast<int64_t>(v.netLayout.slabsBytes / (static_cast<uint64_t>(R) * sl.stride));
  const int elems = shape.hiddenBytes / 2;  // bf16
  const int64_t all = static_cast<int64_t>(gridDim.x) * (kWarps - kCombineSendWarps);
  for (int64_t t = w; t < in.tokens; t += all) {
    const uint32_t ranks = __ballot_sync(0xffffffffu, lane < R && in.tokenInRank[t * R + lane]);
    const char* row[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const bool from = (ranks >> r) & 1u;
      if (!v.sameNode(r)) {  // another node's rows: row k of its network slab, after its put landed
        const int64_t k = from ? v.tokenRowIndex[t * R + r] : 0;
        row[r] =
            v.network + v.netLayout.slabs + (static_cast<uint64_t>(r) * networkSlabTokens + k) * sl.stride;
        if (from && !awaitCount(&v.netState->combineArrived[r], e, v.spin[r], DeviceOp::EpCombineWait))
          return;
        continue;
      }
      row[r] = slabs + (static_cast<uint64_t>(r) * slabTokens + t) * sl.stride;
      if (from && !awaitFlag(reinterpret_cast<const uint64_t*>(row[r] + sl.flag), e, v.spin[r])) return;
    }
    // kReduceChunks<kR> chunks of 8 elements a lane: every rank's loads of them in flight before the sums.
    for (int h0 = lane * 8; h0 < elems; h0 += 32 * 8 * kReduceChunks<kR>) {
      uint4 packed[kReduceChunks<kR>][kR];
#pragma unroll
      for (int u = 0; u < kReduceChunks<kR>; ++u) {
        const int h = h0 + u * 32 * 8;
#pragma unroll
        for (int r = 0; r < kR; ++r)
          if (h < elems && ((ranks >> r) & 1u))
            packed[u][r] = *reinterpret_cast<const uint4*>(row[r] + 2 * h);
      }
#pragma unroll
      for (int u = 0; u < kReduceChunks<kR>; ++u) {
        const int h = h0 + u * 32 * 8;
        if (h >= elems) break;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const void* biases[2] = {in.bias0, in.bias1};
        for (const void* bias : biases) {
          if (!bias) continue;
          const auto* b = reinterpret_cast<const __nv_bfloat16*>(bias) + t * elems + h;
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[j] += __bfloat162float(b[j]);
        }
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          if (!((ranks >> r) & 1u)) continue;
          const auto* vals = reinterpret_cast<const __nv_bfloat16*>(&packed[u][r]);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[j] += __bfloat162float(vals[j]);
        }
        uint4 result;
        auto* o = reinterpret_cast<__nv_bfloat16*>(&result);
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = __float2bfloat16(acc[j]);
        *reinterpret_cast<uint4*>(reinterpret_cast<__nv_bfloat16*>(out.x) + t * elems + h) = result;
      }
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

// The network waiter of a combine, one thread per rank r of another node: r's signals on the channel come in
// the order r sends them, ready (r's slabs may be overwritten) then its rows; each wait (acquire) is relayed
// to a device counter with a release store of the epoch, which the staging warp and the reduce warps read.
__device__ void relayNetworkSignals(const KernelView& v, int r, uint64_t e) {
  PortChannelDeviceHandle ch = v.net[r];
  if (!ch.wait()) return;
  device::storeReleaseSys(&v.netState->combineReady[r], e);
  if (!ch.wait()) return;
  device::storeReleaseSys(&v.netState->combineArrived[r], e);
}

// Sends and reduces at once (combineSend, combineReduce). First block 0 tells every source it may write into
// this rank's slabs (an LL packet, flag: the epoch; this rank's previous combine, reductions included, has
// finished), and every block waits for its destinations' packets. Slab rows are written once per call, so no
// send waits on a reduction; a reduction waits only on sends, which every rank's resident blocks make.
template <int kR>
__global__ void __launch_bounds__(kThreads, 1)
    combineKernel(KernelView v, CombineInputs in, Shape shape, CombineOutputs out) {
  const int R = v.size, me = v.rank, warp = threadIdx.x / 32;
  const uint64_t e = beginEpoch(v.combineEpoch, v.combineStarted);
  const uint32_t call = traceCall(EpTraceKernel::Combine, e);
  if (threadIdx.x == 0) v.trace.record(call, traceCode(EpTraceEvent::CombineStart), 0);
  const uint32_t flag = llPacketFlag(e);
  const SlabLayout sl = SlabLayout::of(shape);
  const int64_t slabTokens =
      static_cast<int64_t>(v.layout.slabsBytes / (static_cast<uint64_t>(R) * sl.stride));
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = true;
  if (blockIdx.x == 0 && threadIdx.x < R) {
    if (v.sameNode(threadIdx.x))
      reinterpret_cast<LL16Packet*>(v.regions[threadIdx.x] + v.layout.ready)[me].write(0, 0, flag);
    else
      PortChannelDeviceHandle(v.net[threadIdx.x]).signal();  // ready: my slabs may be overwritten
  }
  __syncthreads();
  if (threadIdx.x < R && v.sameNode(threadIdx.x)) {
    const auto* ready = reinterpret_cast<const LL16Packet*>(v.regions[me] + v.layout.ready);
    uint32_t vals[2];
    if (device::awaitPacket(ready, threadIdx.x, flag, v.spin[threadIdx.x], vals) !=
        device::PacketWait::Arrived)
      ok = false;
  }
  __syncthreads();
  if (threadIdx.x == 0) v.trace.record(call, traceCode(EpTraceEvent::CombineReady), 0);

  if (v.net && blockIdx.x == gridDim.x - 1 && warp == kWarps - 1 && threadIdx.x % 32 < R &&
      !v.sameNode(threadIdx.x % 32))
    relayNetworkSignals(v, threadIdx.x % 32, e);  // a reduce warp: no peer waits on its work
  if (warp < kCombineSendWarps) {
    if (ok) combineSend(v, in, shape, e, slabTokens, static_cast<int>(blockIdx.x) * kCombineSendWarps + warp);
    if (threadIdx.x % 32 == 0) v.trace.record(call, traceCode(EpTraceEvent::CombineSendDone), warp);
  } else {
    combineReduce<kR>(
        v, in, shape, out, e, slabTokens,
        static_cast<int64_t>(blockIdx.x) * (kWarps - kCombineSendWarps) + warp - kCombineSendWarps);
    if (threadIdx.x % 32 == 0) v.trace.record(call, traceCode(EpTraceEvent::CombineReduceDone), warp);
  }
  endEpoch(e, v.combineEpoch, v.combineStarted);
}

// One block: index[t][r] = the tokens before t that go to rank r (an exclusive scan of is_token_in_rank's
// column r). Local memory only.
constexpr int kScanThreads = 1024;
__global__ void __launch_bounds__(kScanThreads)
    tokenRowIndexKernel(const bool* tokenInRank, int tokens, int ranks, int32_t* index) {
  using Scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename Scan::TempStorage scratch;
  for (int r = 0; r < ranks; ++r) {
    int carry = 0;
    for (int base = 0; base < tokens; base += kScanThreads) {
      const int t = base + threadIdx.x;
      const int in = t < tokens && tokenInRank[static_cast<int64_t>(t) * ranks + r] ? 1 : 0;
      int before = 0, sum = 0;
      Scan(scratch).ExclusiveSum(in, before, sum);
      if (t < tokens) index[static_cast<int64_t>(t) * ranks + r] = carry + before;
      carry += sum;
      __syncthreads();  // scratch is reused by the next scan
    }
  }
}

// One thread: the epoch advances by `calls` and the started count with it (beginEpoch/endEpoch's invariant:
// started = epoch * blocks between calls). Stream-ordered with the kernels that use the counters.
__global__ void skipEpochsKernel(uint64_t* epoch, uint64_t* started, uint64_t calls, uint64_t blocks) {
  *epoch += calls;
  *started += calls * blocks;
}

// Thread r of another node's rank r awaits (and so consumes) `calls` of r's signals.
__global__ void skipNetworkSignalsKernel(KernelView v, uint64_t calls) {
  const int r = threadIdx.x;
  if (r >= v.size || v.sameNode(r)) return;
  PortChannelDeviceHandle ch = v.net[r];
  for (uint64_t c = 0; c < calls; ++c)
    if (!ch.wait()) return;
}

}  // namespace

void launchSkipNetworkSignals(const KernelView& v, uint64_t calls, cudaStream_t stream) {
  skipNetworkSignalsKernel<<<1, kMaxRanks, 0, stream>>>(v, calls);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchTokenRowIndex(const bool* tokenInRank, int tokens, int ranks, int32_t* index,
                         cudaStream_t stream) {
  if (tokens == 0) return;
  tokenRowIndexKernel<<<1, kScanThreads, 0, stream>>>(tokenInRank, tokens, ranks, index);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

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
  dispatchSendKernel<<<v.blocks - v.receiveBlocks, kSendThreads, 0, stream>>>(v, in, shape);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

void launchDispatchReceive(const KernelView& v, const DispatchOutputs& out, const Shape& shape,
                           cudaStream_t stream) {
  dispatchReceiveKernel<<<v.receiveBlocks, kReceiveThreads, 0, stream>>>(v, out, shape,
                                                                         v.blocks - v.receiveBlocks);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

// The reduce's loads and sums are unrolled over the ranks: one combine kernel per group size 1..kMaxRanks,
// the one for v.size launched.
template <int... kSizes>
void launchCombineForSize(std::integer_sequence<int, kSizes...>, const KernelView& v, const CombineInputs& in,
                          const Shape& shape, const CombineOutputs& out, cudaStream_t stream) {
  const bool launched =
      ((v.size == kSizes + 1
            ? (combineKernel<kSizes + 1><<<v.blocks, kThreads, 0, stream>>>(v, in, shape, out), true)
            : false) ||
       ...);
  if (!launched)  // a Buffer refuses group sizes above kMaxRanks when it is created
    MESHCOMM_THROW(ErrorCode::InternalError, "rank ", v.rank, " ep combine: no kernel for group size ",
                   v.size);
}

void launchCombine(const KernelView& v, const CombineInputs& in, const Shape& shape,
                   const CombineOutputs& out, cudaStream_t stream) {
  launchCombineForSize(std::make_integer_sequence<int, kMaxRanks>{}, v, in, shape, out, stream);
  MESHCOMM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace meshcomm::ep::kernels

MESHCOMM_KERNEL_MODULE()
