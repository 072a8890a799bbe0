// The layout of an EpBuffer's registered region (the same on every rank) and the view its kernels take by
// value. Offsets are bytes from the region's base; the peers reach the same offsets in their mappings.
//
//   [dispatch records: R x kMaxSendBlocks x kDispatchRounds x LL16][ready packets: R x LL16]
//   [count packets: R x kCountPacketBytes][dispatch rows ......][combine slabs: R x slabTokens x
//   SlabLayout::stride]
//
// A dispatch record [s][b][r] is round r of sender block b of rank s: its row range in this rank's dispatch
// rows (an LL packet: begin, end, flag = llPacketFlag of the call's epoch), written after the round's rows.
//
// A dispatch row: [x: hiddenBytes][topkIdx: topk x i64][weights: topk x f32][scales: scales x f32][srcIdx:
// i32], padded to 16 bytes. A combine slab row: [y: hiddenBytes][weights: topk x f32][flag: u64 at an 8-byte
// offset], padded to 16 bytes; the flag holds the epoch of the combine that wrote the row.
//
// Across nodes (docs/ep.md, "Internode") each rank also has a network region in pinned host memory that its
// GPU reads and writes through the mapping, and that only its proxy and TCP receiver touch on the host:
//
//   [count rows in: R x kCountRecordBytes][count rows out: R x kCountRecordBytes][dispatch staging]
//   [combine staging][dispatch rows from other nodes][combine rows from other nodes: R x networkSlabTokens]
//
// Rows crossing the network go from a staging area to the receiver's network region, at the same row
// positions as the device areas (dispatch: the receive order; combine: slab [sender][k], k the token's rank
// among those the source sent the sender).
#pragma once

#include <cstdint>

#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/packet.hpp"
#include "meshcomm/device/port_channel_device.hpp"
#include "meshcomm/device/trace.hpp"
#include "meshcomm/ep/ep_buffer.hpp"

namespace meshcomm::ep {

// One count row a sender sends each destination: R token counts, the destination's local-expert counts, the
// sender's token count.
constexpr int kCountWords = kMaxRanks + kMaxExperts + 1;
// Most blocks a dispatch send kernel runs (one record slot per block, round and source).
constexpr int kMaxSendBlocks = 256;
// A send block's token chunk goes out in this many rounds, each published by a record, so the receiver
// copies a round's rows out while the next ones are still being sent.
constexpr int kDispatchRounds = 8;
constexpr uint64_t kCountPacketBytes =
    (kCountWords * 4 + LL16Packet::kPayloadBytes - 1) / LL16Packet::kPayloadBytes * sizeof(LL16Packet);

MESHCOMM_HOST_DEVICE_INLINE uint64_t align16(uint64_t v) {
  return (v + 15) / 16 * 16;
}

// One count row as plain words (kCountWords int32), the form it crosses the network in.
constexpr uint64_t kCountRecordBytes = (kCountWords * 4 + 15) / 16 * 16;

struct RowLayout {
  uint64_t stride, topkIdx, weights, scales, srcIdx;  // byte offsets inside one dispatch row

  MESHCOMM_HOST_DEVICE_INLINE static RowLayout of(const Shape& s) {
    RowLayout r;
    r.topkIdx = static_cast<uint64_t>(s.hiddenBytes);
    r.weights = r.topkIdx + 8ull * s.topk;
    r.scales = r.weights + 4ull * s.topk;
    r.srcIdx = r.scales + 4ull * s.scales;
    r.stride = align16(r.srcIdx + 4);
    return r;
  }
};

struct SlabLayout {
  uint64_t stride, weights, flag;  // byte offsets inside one combine slab row

  MESHCOMM_HOST_DEVICE_INLINE static SlabLayout of(const Shape& s) {
    SlabLayout r;
    r.weights = static_cast<uint64_t>(s.hiddenBytes);
    r.flag = (r.weights + 4ull * s.topk + 7) / 8 * 8;
    r.stride = align16(r.flag + 8);
    return r;
  }
};

struct RegionLayout {
  uint64_t records = 0, ready = 0, counts = 0, rows = 0, rowsBytes = 0, slabs = 0, slabsBytes = 0;

  static RegionLayout of(uint64_t bytes) {
    RegionLayout l;
    l.records = 0;
    l.ready = sizeof(LL16Packet) * kMaxRanks * kMaxSendBlocks * kDispatchRounds;
    l.counts = l.ready + sizeof(LL16Packet) * kMaxRanks;
    const uint64_t header = (l.counts + kCountPacketBytes * kMaxRanks + 255) / 256 * 256;
    const uint64_t rest = bytes > header ? bytes - header : 0;
    l.rows = header;
    l.rowsBytes = rest / 2 / 256 * 256;
    l.slabs = l.rows + l.rowsBytes;
    l.slabsBytes = rest - l.rowsBytes;
    return l;
  }
  uint64_t headerBytes() const { return rows; }
};

struct NetworkLayout {
  uint64_t countsIn = 0, countsOut = 0, dispatchStaging = 0, combineStaging = 0, stagingBytes = 0, rows = 0,
           rowsBytes = 0, slabs = 0, slabsBytes = 0;

  static NetworkLayout of(uint64_t bytes) {
    NetworkLayout l;
    l.countsIn = 0;
    l.countsOut = kCountRecordBytes * kMaxRanks;
    const uint64_t header = (l.countsOut + kCountRecordBytes * kMaxRanks + 255) / 256 * 256;
    const uint64_t rest = bytes > header ? bytes - header : 0;
    l.stagingBytes =
        rest / 8 / 256 * 256;  // an eighth each for the two stagings, the rest shared by the areas
    l.dispatchStaging = header;
    l.combineStaging = l.dispatchStaging + l.stagingBytes;
    l.rows = l.combineStaging + l.stagingBytes;
    l.rowsBytes = (rest - 2 * l.stagingBytes) / 2 / 256 * 256;
    l.slabs = l.rows + l.rowsBytes;
    l.slabsBytes = rest - 2 * l.stagingBytes - l.rowsBytes;
    return l;
  }
  uint64_t headerBytes() const { return dispatchStaging; }
};

// This rank's received totals, written by the GPU into host-mapped memory (`tag` last: the host's ticket of
// the dispatchSend that wrote them; a graph replay writes its captured ticket, never the one the host
// awaits).
struct HostCounts {
  int32_t rows;
  int32_t perLocalExpert[kMaxExperts];
  uint64_t tag;
};

// Device counters of the network paths (never reset; each call adds to them): per peer rank, the blocks
// (dispatch) or warps (combine) that have staged their rows for it, and the combine epoch whose ready signal
// and whose rows from it have arrived.
struct NetworkState {
  uint64_t dispatchStaged[kMaxRanks];
  uint64_t combineStaged[kMaxRanks];
  uint64_t combineReady[kMaxRanks];
  uint64_t combineArrived[kMaxRanks];
  uint64_t
      landed[kMaxRanks];  // the epoch of the last dispatch whose rows from rank s arrived (receive kernel)
};

// The device trace events of EpBuffer's kernels (docs/trace.md; call: which kernel in bits 30-31, its epoch
// in bits 0-29). Per block (thread 0, arg 0): a kernel's start and a dispatch receive's counts; per warp
// (lane 0, arg: the warp in its block): when a combine send or reduce warp is done. The events' names:
// EpBuffer (ep_buffer.cc), in this order.
enum class EpTraceEvent : uint8_t {
  DispatchSendStart,
  DispatchSendEnd,
  ReceiveStart,
  ReceiveCounts,
  ReceiveEnd,
  CombineStart,
  CombineReady,
  CombineSendDone,
  CombineReduceDone,
};

enum class EpTraceKernel : uint8_t { DispatchSend, DispatchReceive, Combine };

// What the kernels take by value.
struct KernelView {
  char* regions[kMaxRanks];  // every rank's region mapped here (this rank's own at [rank])
  RegionLayout layout;
  int rank, size, blocks;       // blocks: the combine's launch size; a dispatch splits it into
  int receiveBlocks;            // blocks - receiveBlocks sending and receiveBlocks receiving, side by side
  SpinContext spin[kMaxRanks];  // per peer: timeouts and reports name it
  uint64_t* dispatchEpoch;      // device counters (never reset): the calls so far
  uint64_t* receiveEpoch;       // (the receive kernel counts its own calls: it may run beside the send)
  uint64_t* combineEpoch;
  uint64_t* dispatchStarted;  // blocks that read the epoch so far (the epoch advances once all did)
  uint64_t* receiveStarted;
  uint64_t* combineStarted;
  uint64_t* countsEpoch;   // the dispatch epoch whose matrix and receivedRows are written (release)
  int32_t* matrix;         // [R][kCountWords]: the count rows of the last dispatch, by source
  int32_t* receivedRows;   // [1]
  HostCounts* hostCounts;  // device pointer of the host-mapped counts
  uint64_t hostTicket;     // dispatchSend: the tag it writes into hostCounts (set per launch)
  // Across nodes: ranks r and q share a node iff r / nodeSize == q / nodeSize; regions[q] of another node's
  // rank is never touched. net[q]: the PortChannel to q (null when the group is one node), between the
  // ranks' network regions; `network`: this rank's (GPU address of the mapped host memory).
  int nodeSize;
  const PortChannelDeviceHandle* net;
  char* network;
  NetworkLayout netLayout;
  NetworkState* netState;
  const int32_t* tokenRowIndex;  // combine: [tokens][R], token t's rank among this rank's tokens sent to r
  DeviceTrace trace;             // off unless MESHCOMM_TRACE is set (EpTraceEvent)

  MESHCOMM_HOST_DEVICE_INLINE bool sameNode(int q) const { return rank / nodeSize == q / nodeSize; }
};

}  // namespace meshcomm::ep
