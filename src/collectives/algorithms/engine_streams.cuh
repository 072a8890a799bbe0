// The data-movement stream engine's buffers and counters (EngineStreams), shared by every engine algorithm
// of a communicator (the pairwise engine of movement_common.cuh, reduce_chain) and persistent across calls,
// with the piece-level device steps of a stream. docs/collectives.md, "Pairwise stream engine", has the
// protocol.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/atomics.hpp"
#include "meshcomm/device/comm_device.hpp"
#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/named_barrier.hpp"

namespace meshcomm::movement {

constexpr uint64_t kMinPieceBytes = 32 << 10;  // smallest per-block piece of a round
constexpr uint64_t kPairwiseRounds = 12;       // rounds per block the pairwise engine's pieces aim at
constexpr uint64_t kChainRounds = 4;           // the chains' (reduce_chain, broadcast_chain)
constexpr int kEngineSlots = 4;                // buffers per (sender, lane): pieces in flight
constexpr int kEngineLanes = 128;              // lanes per (sender, receiver): the most blocks per peer

MESHCOMM_HOST_DEVICE_INLINE uint64_t divUp(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}
MESHCOMM_HOST_DEVICE_INLINE uint64_t roundUp16(uint64_t a) {
  return (a + 15) & ~uint64_t{15};
}
MESHCOMM_HOST_DEVICE_INLINE uint64_t minU(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}
MESHCOMM_HOST_DEVICE_INLINE uint64_t maxU(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

// ---- engine streams -------------------------------------------------------------------------------------
// The engine's state, shared by every engine algorithm of a communicator (CommResources::sharedState) and
// persistent across calls, in a region of every rank's packet buffer (mapped on every peer):
//   buffers:  per sender slot s (s != this rank, in rank order), engineLanes(n, s, r) lanes of
//             [buf kEngineSlots][pieceMax]                                (pieces from s land here)
//   counters: [from rank n][lane kEngineLanes][data, credit] uint64
// plus two local arrays of device words [peer][lane]: pieces sent to / consumed from that peer on that lane,
// over all calls. Block c of a pair uses lane c. Rank S's piece number g (counted over all calls) to rank R
// on lane c goes into buf g % K of R's slot [S], lane c, once S has seen its credit counter from R reach
// g - K + 1 (R has consumed piece g - K); then S adds 1 to R's data counter from S. R waits for that counter
// to reach g + 1, copies the piece out and adds 1 to S's credit counter from R (NCCL's head/tail protocol).
// The counters persist, so a call needs no opening handshake, and no other algorithm touches the region.
//
// Lanes of sender s in receiver r's region: chain neighbours (s = r +- 1 mod n; reduce_chain and
// broadcast_chain stream between neighbours with up to kEngineLanes blocks) get kEngineLanes, other peers
// kEngineLanes / (n - 1) (the pairwise engine runs every peer at once, at most that many blocks each).
MESHCOMM_HOST_DEVICE_INLINE int engineLanes(int n, int s, int r) {
  const int d = (s - r + n) % n;
  return d == 1 || d == n - 1 ? kEngineLanes : kEngineLanes / (n - 1);
}
// Blocks per peer the pairwise engine may use: the lanes every pair has.
MESHCOMM_HOST_DEVICE_INLINE int pairwiseLanes(int n) {
  return n <= 3 ? kEngineLanes : kEngineLanes / (n - 1);
}
// Lanes of every rank's region (the same for every receiver).
MESHCOMM_HOST_DEVICE_INLINE uint64_t totalEngineLanes(int n) {
  uint64_t t = 0;
  for (int s = 1; s < n; ++s) t += static_cast<uint64_t>(engineLanes(n, s, 0));
  return t;
}

struct EngineStreams {
  uint64_t bufOffset = 0;        // of the buffers in every rank's packet buffer
  uint64_t counterOffset = 0;    // of the counters in every rank's packet buffer
  uint64_t pieceMax = 0;         // bytes of one buffer (multiple of 16; 0: no engine region)
  uint64_t* sent = nullptr;      // [nRanks][kEngineLanes], local
  uint64_t* consumed = nullptr;  // [nRanks][kEngineLanes], local
  int blocksPerPeer = 1;         // of this launch

  // Per-block piece of a round for a stream of maxBytes (a pair: its larger direction): at least
  // kMinPieceBytes (amortises the per-piece fence and counter update), else about `rounds` rounds, at most
  // pieceMax. The pairwise engine aims at kPairwiseRounds: on 2x H100 (alltoall and allgather, 2 ranks, 128
  // blocks) 4 rounds left the copy-out of the last pieces unoverlapped, 266-277 GB/s busbw at 64-256 MiB
  // against 281-320 with 10-12 rounds; 16 rounds cost 2% at 1 GiB, where 12 reach pieceMax (331 GB/s as
  // with 4); neutral on 4x H100. The chains keep kChainRounds: their per-piece handshake across n-1 hops
  // bounds them (docs/collectives.md, Chains); more rounds there are not measured.
  MESHCOMM_HOST_DEVICE_INLINE uint64_t pieceCap(uint64_t maxBytes, uint64_t rounds) const {
    const uint64_t want = roundUp16(divUp(maxBytes, static_cast<uint64_t>(blocksPerPeer) * rounds));
    return minU(pieceMax, maxU(kMinPieceBytes, want));
  }

#if defined(__CUDACC__)
  // Counter `which` (0 data, 1 credit) in rank `at`'s region that rank `from` advances for lane `lane`.
  MESHCOMM_DEVICE_INLINE uint64_t* counter(const CommDeviceView& v, int at, int from, int lane,
                                           int which) const {
    return reinterpret_cast<uint64_t*>(static_cast<char*>(v.peerPackets[at]) + counterOffset) +
           (static_cast<uint64_t>(from) * kEngineLanes + static_cast<uint64_t>(lane)) * 2 + which;
  }
  // The buffer of piece g from `sender` on `lane` in rank `at`'s region.
  MESHCOMM_DEVICE_INLINE char* buffer(const CommDeviceView& v, int at, int sender, int lane,
                                      uint64_t g) const {
    uint64_t slot = 0;  // lanes of the senders before `sender` in `at`'s region
    for (int t = 0; t < sender; ++t)
      if (t != at) slot += static_cast<uint64_t>(engineLanes(v.nRanks, t, at));
    return static_cast<char*>(v.peerPackets[at]) + bufOffset +
           ((slot + static_cast<uint64_t>(lane)) * kEngineSlots + g % kEngineSlots) * pieceMax;
  }
#endif
};

struct Piece {
  uint64_t off;
  uint64_t len;
};

// Block c's piece of round t of a stream of `bytes`: the round's range split evenly (16-byte multiples).
MESHCOMM_HOST_DEVICE_INLINE Piece roundPiece(uint64_t bytes, uint64_t t, uint64_t roundBytes, int B, int c) {
  const uint64_t rs = t * roundBytes;
  if (rs >= bytes) return {rs, 0};
  const uint64_t rl = minU(roundBytes, bytes - rs);
  const uint64_t per = roundUp16(divUp(rl, static_cast<uint64_t>(B)));
  const uint64_t off = rs + per * static_cast<uint64_t>(c);
  if (off >= rs + rl) return {off, 0};
  return {off, minU(per, rs + rl - off)};
}

#if defined(__CUDACC__)
// What a counter wait also watches (pairwiseKernel: the peer's pair header): poll(ctx) is called every
// kWaitCheckInterval polls of the counter that fail, and false from it ends the wait (the wait returns
// false). NoWaitCheck watches nothing.
constexpr uint32_t kWaitCheckInterval = 4;
struct NoWaitCheck {
  MESHCOMM_DEVICE_INLINE bool poll(const SpinContext&) { return true; }
};

// Acquire spin until *word reaches target (wrap-safe); false on timeout/abort (reported through ctx) or
// when check.poll refuses.
template <class Check = NoWaitCheck>
MESHCOMM_DEVICE_INLINE bool spinAtLeast(const uint64_t* word, uint64_t target, const SpinContext& ctx,
                                        Check&& check = {}) {
  uint32_t polls = 0;
  bool refused = false;
  const bool ok = device::spinUntil(
      [&](uint64_t& seen) {
        seen = device::loadAcquireSys(word);
        if (device::reached(seen, target)) return true;
        refused = ++polls % kWaitCheckInterval == 0 && !check.poll(ctx);
        return refused;
      },
      ctx, DeviceOp::SemaphoreWait, target);
  return ok && !refused;
}

// Piece-level steps of one stream (thread 0 of the block; the block synchronises around them), each wait
// watching `check` as spinAtLeast does:
// Sender, before writing piece g into es.buffer(v, to, rank, lane, g): acquire — the receiver has copied
// piece g - K out of that buffer.
template <class Check = NoWaitCheck>
MESHCOMM_DEVICE_INLINE bool awaitCredit(const EngineStreams& es, const CommDeviceView& v, int to, int lane,
                                        uint64_t g, const SpinContext& ctx, Check&& check = {}) {
  return g < kEngineSlots ||
         spinAtLeast(es.counter(v, v.rank, to, lane, 1), g - kEngineSlots + 1, ctx, check);
}
// Sender, after the block's writes of a piece and __syncthreads(): release — publishes the piece.
MESHCOMM_DEVICE_INLINE void publishPiece(const EngineStreams& es, const CommDeviceView& v, int to, int lane) {
  device::redAddReleaseSys(es.counter(v, to, v.rank, lane, 0), 1);
}
// Receiver, before reading piece g from es.buffer(v, rank, from, lane, g): acquire — the piece is there.
template <class Check = NoWaitCheck>
MESHCOMM_DEVICE_INLINE bool awaitPiece(const EngineStreams& es, const CommDeviceView& v, int from, int lane,
                                       uint64_t g, const SpinContext& ctx, Check&& check = {}) {
  return spinAtLeast(es.counter(v, v.rank, from, lane, 0), g + 1, ctx, check);
}
// Receiver, after the block's reads of a piece and __syncthreads(): release — the buffer may be refilled.
MESHCOMM_DEVICE_INLINE void releasePiece(const EngineStreams& es, const CommDeviceView& v, int from,
                                         int lane) {
  device::redAddReleaseSys(es.counter(v, from, v.rank, lane, 1), 1);
}

#endif

// ---- chains -----------------------------------------------------------------------------------------------
// A chain passes every piece of a message from rank to rank (reduce_chain towards the root, broadcast_chain
// away from it): block c of every rank drives lane c; the grid (B blocks) is the same on every rank.
// Position k of rank r in a chain that ends (reduce) or starts (broadcast) at the root: (r - root) mod n.
struct ChainLinks {
  int up;    // the rank this one receives pieces from (-1: none, the chain's head)
  int down;  // the rank it sends pieces to (-1: none, the chain's tail)
};

#if defined(__CUDACC__)
// ---- the published-step pipeline
// --------------------------------------------------------------------------- The step loop of a chain lane
// and of a pairwise-engine block. A piece's system-scope release waits until the piece's stores reached the
// peer (~1-2 us), so the block is warp-specialised: a publisher warp (the last) does the releases while the
// compute warps run up to two steps ahead:
//   compute warps, step s: [s >= 2: sync FREE(s): the publisher finished step s-2]; thread 0 runs acquire(s)
//     (acquire spins) and posts its verdict; sync COMPUTE; if the verdict holds, compute(s, tid, nt) with
//     nt = publishedStepComputeThreads() (weak loads and stores); arrive DONE(s) (CTA release of them).
//   publisher warp, step s: sync DONE(s) (acquire); if the verdict holds, its lane 0 runs publish(s)
//     (system-scope releases, cumulative over the compute warps' accesses the barrier ordered); arrive
//     FREE(s).
// DONE, FREE and the verdict alternate by step parity. Returns, on every thread, true when all steps ran and
// false after a 0 verdict (a failed spin: every warp leaves the loop; the communicator is dead). Every thread
// of the block calls it; blockDim.x >= 64, a multiple of 32.
constexpr int kStepComputeBarrier = 1;  // named barrier ids (0 is __syncthreads'); DONE and FREE take two
constexpr int kStepDoneBarrier = 2;
constexpr int kStepFreeBarrier = 4;

MESHCOMM_DEVICE_INLINE uint32_t publishedStepComputeThreads() {
  return blockDim.x - 32;
}

template <class Acquire, class Compute, class Publish>
MESHCOMM_DEVICE_INLINE bool runPublishedSteps(uint64_t steps, Acquire&& acquire, Compute&& compute,
                                              Publish&& publish) {
  const int all = static_cast<int>(blockDim.x);
  const uint32_t computeThreads = publishedStepComputeThreads();
  __shared__ int verdict[2];            // compute thread 0's, per step parity: 1 = run the step, 0 = stop
  if (threadIdx.x >= computeThreads) {  // the publisher warp
    for (uint64_t s = 0; s < steps; ++s) {
      device::namedBarrierSync(kStepDoneBarrier + static_cast<int>(s % 2), all);
      if (!verdict[s % 2]) return false;
      if (threadIdx.x == computeThreads) publish(s);
      if (s + 2 < steps) device::namedBarrierArrive(kStepFreeBarrier + static_cast<int>(s % 2), all);
    }
    return true;
  }
  for (uint64_t s = 0; s < steps; ++s) {
    if (s >= 2) device::namedBarrierSync(kStepFreeBarrier + static_cast<int>(s % 2), all);
    if (threadIdx.x == 0) verdict[s % 2] = acquire(s) ? 1 : 0;
    device::namedBarrierSync(kStepComputeBarrier, static_cast<int>(computeThreads));
    const bool ok = verdict[s % 2] != 0;
    if (ok) compute(s, static_cast<uint32_t>(threadIdx.x), computeThreads);
    device::namedBarrierArrive(kStepDoneBarrier + static_cast<int>(s % 2), all);
    if (!ok) return false;
  }
  return true;
}

// Runs block c's lane of a chain over a message of `bytes` in rounds of `roundBytes` (its piece of round s
// is roundPiece(bytes, s, roundBytes, B, c)) as published steps: acquire the upstream piece and the
// downstream credit; step(piece, upstream buffer or null, downstream buffer or null, tid, nThreads); publish
// the piece downstream and free the upstream buffer. The lane's piece counters advance by the pieces of
// this call. Blocks of neighbouring ranks wait on each other: the grid must be co-resident.
template <class Step>
MESHCOMM_DEVICE_INLINE void runChainLane(const EngineStreams& es, const CommDeviceView& v, ChainLinks l,
                                         uint64_t bytes, uint64_t roundBytes, const SpinContext& ctx,
                                         Step&& step) {
  const int c = blockIdx.x, B = gridDim.x;
  const uint64_t T = divUp(bytes, roundBytes);
  uint64_t* consumedWord = l.up >= 0 ? es.consumed + static_cast<uint64_t>(l.up) * kEngineLanes + c : nullptr;
  uint64_t* sentWord = l.down >= 0 ? es.sent + static_cast<uint64_t>(l.down) * kEngineLanes + c : nullptr;
  const uint64_t in0 = consumedWord ? *consumedWord : 0;  // written by earlier launches only
  const uint64_t out0 = sentWord ? *sentWord : 0;
  const bool done = runPublishedSteps(
      T,
      [&](uint64_t s) {
        const bool ok = l.up < 0 || awaitPiece(es, v, l.up, c, in0 + s, ctx);
        return ok && (l.down < 0 || awaitCredit(es, v, l.down, c, out0 + s, ctx));
      },
      [&](uint64_t s, uint32_t tid, uint32_t nThreads) {
        const Piece p = roundPiece(bytes, s, roundBytes, B, c);
        if (p.len > 0) {
          step(p, l.up >= 0 ? es.buffer(v, v.rank, l.up, c, in0 + s) : nullptr,
               l.down >= 0 ? es.buffer(v, l.down, v.rank, c, out0 + s) : nullptr, tid, nThreads);
        }
      },
      [&](uint64_t) {
        if (l.down >= 0) publishPiece(es, v, l.down, c);
        if (l.up >= 0) releasePiece(es, v, l.up, c);
      });
  if (done && threadIdx.x == 0) {
    if (consumedWord) *consumedWord = in0 + T;
    if (sentWord) *sentWord = out0 + T;
  }
}

// The timeout context of a chain lane (names this rank and a neighbour).
MESHCOMM_DEVICE_INLINE SpinContext chainSpinContext(const CommDeviceView& v, ChainLinks l) {
  if (l.up < 0 && l.down < 0) return SpinContext{nullptr, 0, v.rank, v.rank};
  return device::channelRef(v, l.up >= 0 ? l.up : l.down, 0).semaphore.spin;
}
#endif

// Blocks of a chain launch: one per kMinPieceBytes of the message, at most kEngineLanes and the SM count.
inline int chainBlocks(uint64_t bytes, int smCount) {
  const uint64_t want = divUp(bytes, kMinPieceBytes);
  return static_cast<int>(std::max<uint64_t>(
      1, std::min<uint64_t>({want, uint64_t{kEngineLanes}, static_cast<uint64_t>(std::max(1, smCount))})));
}

// The engine state every engine algorithm of a communicator shares (created by the first one initialized):
// its packet-buffer region (half of MESHCOMM_PACKET_BYTES, or what is left if less: buffers + counters, the
// same offsets on every rank since every rank initializes the same algorithms in the same order) and the
// local piece counters. pieceMax stays 0 (the engine algorithms decline, naming MESHCOMM_PACKET_BYTES) when
// not even 16 bytes per buffer are left.
inline EngineStreams sharedEngineStreams(CommResources& resources) {
  std::shared_ptr<void>& slot = resources.sharedState("movement.engine_streams");
  if (!slot) {
    auto st = std::make_shared<EngineStreams>();
    const CommDeviceView& v = resources.view();
    const uint64_t n = static_cast<uint64_t>(v.nRanks);
    if (n > 1) {
      const uint64_t counterBytes = n * kEngineLanes * 2 * sizeof(uint64_t);
      constexpr uint64_t kAlignmentSlack = 2 * 256;  // two regions at reservePacketRegion's alignment
      const uint64_t free = resources.packetBytesFree();
      const uint64_t budget = std::min<uint64_t>(static_cast<uint64_t>(v.packetBytes) / 2,
                                                 free > kAlignmentSlack ? free - kAlignmentSlack : 0);
      const uint64_t lanes = totalEngineLanes(v.nRanks);
      const uint64_t perBuffer = budget > counterBytes ? (budget - counterBytes) / (lanes * kEngineSlots) : 0;
      st->pieceMax = perBuffer & ~uint64_t{15};
      if (st->pieceMax > 0) {
        st->counterOffset = resources.reservePacketRegion(counterBytes);
        st->bufOffset = resources.reservePacketRegion(st->pieceMax * lanes * kEngineSlots);
        st->sent = resources.allocateDeviceWords(n * kEngineLanes);
        st->consumed = resources.allocateDeviceWords(n * kEngineLanes);
      }
    }
    slot = st;
  }
  return *std::static_pointer_cast<EngineStreams>(slot);
}

}  // namespace meshcomm::movement
