// The layout of a LowLatencyBuffer's registered region (the same on every rank) and the view its kernels take
// by value. Offsets are bytes from the region's base.
//
//   [dispatch counts: 2 halves x kMaxExperts u64]  word (el * R + source): epoch << 32 | rows
//   [combine ready:   2 halves x kMaxExperts u64]  word (global expert): epoch
//   [dispatch credits: 2 halves x kMaxRanks u64][combine credits: 2 halves x kMaxRanks u64]
//                                     word (half, peer): the last epoch of that half the peer has finished
//                                     reading
//   [dispatch messages: 2 halves x E x M x messageStride]  (el, source, slot) of the receiver's experts
//   [combine rows:      2 halves x E x M x 2H]             (global expert, token) of the owner's tokens
//
// A message: [16 bytes: source token (i32), padding][payload: H fp8 + H/128 f32 scales, or 2H bf16].
#pragma once

#include <cstdint>

#include "meshcomm/device/device_error.hpp"
#include "meshcomm/ep/ep_buffer.hpp"
#include "meshcomm/ep/low_latency_buffer.hpp"

namespace meshcomm::ep {

struct LowLatencyLayout {
  uint64_t dispatchCounts, combineReady, dispatchCredits, combineCredits, messages, rows;
  uint64_t messageStride, messagesHalf, rowsHalf, total;

  MESHCOMM_HOST_DEVICE_INLINE static LowLatencyLayout of(int maxTokens, int hidden, int numExperts) {
    LowLatencyLayout l;
    l.dispatchCounts = 0;
    l.combineReady = l.dispatchCounts + 2ull * kMaxExperts * 8;
    l.dispatchCredits = l.combineReady + 2ull * kMaxExperts * 8;
    l.combineCredits = l.dispatchCredits + 2ull * kMaxRanks * 8;
    l.messages = (l.combineCredits + 2ull * kMaxRanks * 8 + 255) / 256 * 256;
    l.messageStride = 16ull + 2ull * hidden;  // the BF16 payload, the larger one
    const uint64_t slots = static_cast<uint64_t>(numExperts) * maxTokens;
    l.messagesHalf = slots * l.messageStride;
    l.rows = l.messages + 2 * l.messagesHalf;
    l.rowsHalf = slots * 2ull * hidden;
    l.total = l.rows + 2 * l.rowsHalf;
    return l;
  }
};

// What the kernels take by value.
struct LowLatencyView {
  char* regions[kMaxRanks];  // every rank's region mapped here (own at [rank])
  SpinContext spin[kMaxRanks];
  LowLatencyLayout layout;
  int rank, size;
  uint64_t* dispatchEpoch;  // device counters (never reset), as in EpBuffer's kernels
  uint64_t* dispatchStarted;
  uint64_t* combineEpoch;
  uint64_t* combineStarted;
  uint64_t* pending;       // [4]: the epoch of the send with ticket t, at [t % 2] (dispatch) and [2 + t % 2]
  uint64_t* receivesDone;  // [op][half] (op 0: dispatch, 1: combine): blocks that finished a receive phase
  uint64_t* combineSendsDone;  // blocks that finished a combine send (sends run in call order)
  uint32_t slot;               // ticket % 2 of this launch
};

}  // namespace meshcomm::ep
