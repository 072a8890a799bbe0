// Host-side decoding and validation of FIFO triggers (pure functions; unit-tested on the CPU).
// The device trusts the host: the proxy checks every trigger against its channels and memories before it
// acts, so a corrupt or out-of-range trigger stops the proxy with an error instead of copying out of bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "meshcomm/device/fifo_device.hpp"
#include "meshcomm/errors.hpp"
#include "transport/range_check.hpp"

namespace meshcomm::internal {

constexpr uint64_t kTriggerTypeMask = kTriggerData | kTriggerSignal | kTriggerFlush;
// The bits between the dst memory field and the parity bit (bit 62). Unused: set only when the device
// encoded a memory id wider than TriggerLayout::kMemoryBits, which then also corrupts the neighbouring
// fields.
constexpr int kTriggerSpareShift = TriggerLayout::kDstMemoryShift + TriggerLayout::kMemoryBits;
constexpr int kTriggerSpareBits = TriggerLayout::kParityShift - kTriggerSpareShift;

struct DecodedTrigger {
  uint64_t spare;  // must be 0
  uint64_t type;
  uint64_t channel;
  uint64_t srcMemory;
  uint64_t dstMemory;
  uint64_t srcOffset;
  uint64_t dstOffset;
  uint64_t bytes;
};

// True when the slot holding `meta` has been published for `position` (its parity bit matches the lap).
inline bool triggerReady(uint64_t meta, uint64_t position, uint64_t fifoSize) {
  return ProxyTrigger::field(meta, TriggerLayout::kParityShift, 1) ==
         ProxyTrigger::parityAt(position, fifoSize);
}

inline DecodedTrigger decodeTrigger(const ProxyTrigger& t) {
  using L = TriggerLayout;
  return {ProxyTrigger::field(t.meta, kTriggerSpareShift, kTriggerSpareBits),
          ProxyTrigger::field(t.meta, L::kTypeShift, L::kTypeBits),
          ProxyTrigger::field(t.meta, L::kChannelShift, L::kChannelBits),
          ProxyTrigger::field(t.meta, L::kSrcMemoryShift, L::kMemoryBits),
          ProxyTrigger::field(t.meta, L::kDstMemoryShift, L::kMemoryBits),
          t.srcOffset,
          t.dstOffset,
          t.bytes};
}

// What the proxy knows about a memory id and a channel id, for validation.
struct TriggerMemoryInfo {
  uint64_t size;
  int owner;   // rank that registered it
  bool local;  // registered by this rank
};

// Checks a decoded trigger. `channelPeer(c)` gives the peer rank of channel c < nChannels, and
// `memoryInfo(m)` the TriggerMemoryInfo of memory m < nMemories. Returns a message naming the offending
// field when the trigger is invalid, nullopt when it may be executed:
//  - the spare bits are 0;
//  - type: a non-empty subset of Data|Signal|Flush;  channel < nChannels;
//  - Data: memory ids < nMemories; src is this rank's memory; dst is the channel peer's memory; both ranges
//    lie inside their registrations (checked without overflow).
template <typename ChannelPeer, typename MemoryInfo>
std::optional<std::string> checkTrigger(const DecodedTrigger& t, uint64_t nChannels,
                                        ChannelPeer&& channelPeer, uint64_t nMemories,
                                        MemoryInfo&& memoryInfo) {
  using detail::concat;
  if (t.spare != 0) {
    return concat("reserved meta bits are set (", t.spare, "): a memory id of ", TriggerLayout::kMemoryBits,
                  " bits or more was pushed on the device");
  }
  if (t.type == 0 || (t.type & ~kTriggerTypeMask) != 0) return concat("unknown trigger type ", t.type);
  if (t.channel >= nChannels)
    return concat("channel ", t.channel, " does not exist (", nChannels, " channels)");
  if ((t.type & kTriggerData) == 0) return std::nullopt;
  if (t.srcMemory >= nMemories)
    return concat("source memory ", t.srcMemory, " does not exist (", nMemories, " memories)");
  if (t.dstMemory >= nMemories) {
    return concat("destination memory ", t.dstMemory, " does not exist (", nMemories, " memories)");
  }
  const TriggerMemoryInfo src = memoryInfo(t.srcMemory);
  const TriggerMemoryInfo dst = memoryInfo(t.dstMemory);
  const int peer = channelPeer(t.channel);
  if (!src.local)
    return concat("source memory ", t.srcMemory, " belongs to rank ", src.owner, ", not this rank");
  if (dst.owner != peer) {
    return concat("destination memory ", t.dstMemory, " belongs to rank ", dst.owner, ", but channel ",
                  t.channel, " connects to rank ", peer);
  }
  if (!rangeWithin(t.srcOffset, t.bytes, src.size)) {
    return concat("source range [", t.srcOffset, ", +", t.bytes, " bytes) exceeds memory ", t.srcMemory, " (",
                  src.size, " bytes)");
  }
  if (!rangeWithin(t.dstOffset, t.bytes, dst.size)) {
    return concat("destination range [", t.dstOffset, ", +", t.bytes, " bytes) exceeds memory ", t.dstMemory,
                  " (", dst.size, " bytes)");
  }
  return std::nullopt;
}

}  // namespace meshcomm::internal
