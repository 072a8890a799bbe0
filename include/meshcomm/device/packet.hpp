// LL ("low latency") packets: payload and flag travel in one vector store, so a reader that sees the
// expected flag also sees the payload, with no fence and no semaphore. Flags start at 1 (fresh or zeroed
// memory never matches) and a caller changes the flag for every reuse of a packet buffer (an epoch).
#pragma once

#include <cstdint>

#include "meshcomm/device/device_error.hpp"
#include "meshcomm/device/macros.hpp"

namespace meshcomm {

// The packet flag of epoch `e` (a count of a packet buffer's uses), the one formula of every LL protocol:
// never 0 (fresh or zeroed memory never matches) nor 0xFFFFFFFF (nor memory filled with 0xff bytes), and
// different for e, e + 1 and e + 2, so a reuse of a buffer or of one of its two halves never matches what the
// previous use left there.
MESHCOMM_HOST_DEVICE_INLINE uint32_t llPacketFlag(uint64_t e) {
  return static_cast<uint32_t>(e % 0xFFFFFFFEull) + 1u;
}

// 16 bytes = {data1, flag1, data2, flag2}: carries 8 payload bytes. Each (data, flag) half is itself an
// 8-byte unit, so the packet stays valid even where a transport splits the 16-byte store in two.
struct alignas(16) LL16Packet {
  uint32_t data1, flag1, data2, flag2;
  static constexpr uint32_t kPayloadBytes = 8;

#if defined(__CUDACC__)
  // One 16-byte volatile store of payload and flags (weak otherwise: the flag *is* the synchronisation).
  MESHCOMM_DEVICE_INLINE void write(uint32_t v1, uint32_t v2, uint32_t flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(this), "r"(v1), "r"(flag), "r"(v2),
                 "r"(flag)
                 : "memory");
  }
  // One 16-byte volatile load; true when both flags equal `flag` (then the payload is valid).
  MESHCOMM_DEVICE_INLINE bool tryRead(uint32_t flag, uint32_t& v1, uint32_t& v2) const {
    const uint4 w = load();
    v1 = w.x;
    v2 = w.z;
    return holds(w, flag);
  }
  // The 16 bytes {data1, flag1, data2, flag2} of one volatile load, checked later with holds(): several such
  // loads issue back to back (nothing waits on a result in between), so their latencies overlap.
  MESHCOMM_DEVICE_INLINE uint4 load() const {
    uint4 w;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                 : "l"(this)
                 : "memory");
    return w;
  }
  // True when a load() saw both flags equal `flag` (then its data1 = w.x and data2 = w.z are valid).
  MESHCOMM_DEVICE_INLINE static bool holds(const uint4& w, uint32_t flag) {
    return w.y == flag && w.w == flag;
  }
#endif
};

// 8 bytes = {data, flag}: carries 4 payload bytes with one 8-byte store (half the efficiency of LL16).
struct alignas(8) LL8Packet {
  uint32_t data, flag;
  static constexpr uint32_t kPayloadBytes = 4;

#if defined(__CUDACC__)
  MESHCOMM_DEVICE_INLINE void write(uint32_t v, uint32_t f) {
    asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(this), "r"(v), "r"(f) : "memory");
  }
  MESHCOMM_DEVICE_INLINE bool tryRead(uint32_t f, uint32_t& v) const {
    uint32_t g;
    asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(v), "=r"(g) : "l"(this) : "memory");
    return g == f;
  }
#endif
};

#if defined(__CUDACC__)
namespace device {

// Bytes of packet buffer that carry `payloadBytes` of data.
template <typename Packet>
MESHCOMM_HOST_DEVICE_INLINE uint64_t packetBufferBytes(uint64_t payloadBytes) {
  return (payloadBytes + Packet::kPayloadBytes - 1) / Packet::kPayloadBytes * sizeof(Packet);
}

namespace detail {
// Loads `n` (< 4) bytes of a 4-byte word without reading past the source.
MESHCOMM_DEVICE_INLINE uint32_t loadPartialWord(const unsigned char* p, uint32_t n) {
  uint32_t w = 0;
  for (uint32_t i = 0; i < n; ++i) w |= static_cast<uint32_t>(p[i]) << (8 * i);
  return w;
}
MESHCOMM_DEVICE_INLINE void storePartialWord(unsigned char* p, uint32_t w, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(w >> (8 * i));
}
// Payload word k (4 bytes) of `src`, zero-padded past `bytes`.
MESHCOMM_DEVICE_INLINE uint32_t payloadWord(const unsigned char* src, uint64_t bytes, uint64_t k,
                                            bool aligned4) {
  uint64_t off = k * 4;
  if (off + 4 <= bytes) {
    if (aligned4) return reinterpret_cast<const uint32_t*>(src)[k];
    return loadPartialWord(src + off, 4);
  }
  return off < bytes ? loadPartialWord(src + off, static_cast<uint32_t>(bytes - off)) : 0u;
}
MESHCOMM_DEVICE_INLINE void storePayloadWord(unsigned char* dst, uint64_t bytes, uint64_t k, uint32_t w,
                                             bool aligned4) {
  uint64_t off = k * 4;
  if (off + 4 <= bytes) {
    if (aligned4)
      reinterpret_cast<uint32_t*>(dst)[k] = w;
    else
      storePartialWord(dst + off, w, 4);
  } else if (off < bytes) {
    storePartialWord(dst + off, w, static_cast<uint32_t>(bytes - off));
  }
}
}  // namespace detail

// Writes `bytes` of `src` as packets with `flag` into `dst` (local or peer-mapped); thread tid of nThreads.
// Any size: a last partial packet is zero-padded.
template <typename Packet = LL16Packet>
MESHCOMM_DEVICE_INLINE void putPackets(Packet* dst, const void* src, uint64_t bytes, uint32_t flag,
                                       uint32_t tid, uint32_t nThreads) {
  const auto* s = static_cast<const unsigned char*>(src);
  const bool aligned4 = (reinterpret_cast<uintptr_t>(s) & 3) == 0;
  const uint64_t nPackets = (bytes + Packet::kPayloadBytes - 1) / Packet::kPayloadBytes;
  for (uint64_t p = tid; p < nPackets; p += nThreads) {
    if constexpr (sizeof(Packet) == 16) {
      const bool full = (p + 1) * 8 <= bytes && (reinterpret_cast<uintptr_t>(s) & 7) == 0;
      uint32_t v1, v2;
      if (full) {
        uint2 v = reinterpret_cast<const uint2*>(s)[p];
        v1 = v.x;
        v2 = v.y;
      } else {
        v1 = detail::payloadWord(s, bytes, 2 * p, aligned4);
        v2 = detail::payloadWord(s, bytes, 2 * p + 1, aligned4);
      }
      dst[p].write(v1, v2, flag);
    } else {
      dst[p].write(detail::payloadWord(s, bytes, p, aligned4), flag);
    }
  }
}

// The default `absent` predicate of awaitPacket / getPackets: the sender writes every packet.
struct EveryPacketSent {
  MESHCOMM_DEVICE_INLINE bool operator()(uint64_t) const { return false; }
};

enum class PacketWait : uint8_t { Arrived, Absent, Failed };

// Waits for packet src[p] with `flag` (Arrived: its payload words in v; LL8 fills v[0] only) or, polled
// only while the packet is missing, for absent(p) to say the sender never writes it (Absent). Acquire by
// flag: each poll is one volatile vector load of payload and flag together. Failed: the spin timed out or
// the communicator aborted (recorded through ctx). pauseNs > 0: __nanosleep between polls (for waits that
// many warps run at once, whose polls would otherwise compete with the arriving data).
template <typename Packet, class Absent = EveryPacketSent>
MESHCOMM_DEVICE_INLINE PacketWait awaitPacket(const Packet* src, uint64_t p, uint32_t flag,
                                              const SpinContext& ctx, uint32_t (&v)[2],
                                              const Absent& absent = {}, unsigned pauseNs = 0) {
  bool arrived = false;
  const bool ok = spinUntil(
      [&](uint64_t& seen) {
        if constexpr (sizeof(Packet) == 16)
          arrived = src[p].tryRead(flag, v[0], v[1]);
        else
          arrived = src[p].tryRead(flag, v[0]);
        seen = v[0];
        if (arrived || absent(p)) return true;
        if (pauseNs > 0) __nanosleep(pauseNs);
        return false;
      },
      ctx, DeviceOp::PacketRead, flag);
  if (!ok) return PacketWait::Failed;
  return arrived ? PacketWait::Arrived : PacketWait::Absent;
}

// Waits for and unpacks `bytes` of payload with `flag` from the local packet buffer `src` into `dst`, each
// packet as soon as it arrives (awaitPacket: same memory order; weak stores to dst); thread tid of
// nThreads. A packet that absent(p) shows the sender never writes is skipped (its bytes of dst are left
// as they are). Returns false if a wait failed (reported through ctx).
template <typename Packet = LL16Packet, class Absent = EveryPacketSent>
MESHCOMM_DEVICE_INLINE bool getPackets(void* dst, const Packet* src, uint64_t bytes, uint32_t flag,
                                       uint32_t tid, uint32_t nThreads, const SpinContext& ctx,
                                       const Absent& absent = {}) {
  auto* d = static_cast<unsigned char*>(dst);
  const bool aligned4 = (reinterpret_cast<uintptr_t>(d) & 3) == 0;
  const bool aligned8 = (reinterpret_cast<uintptr_t>(d) & 7) == 0;
  const uint64_t nPackets = (bytes + Packet::kPayloadBytes - 1) / Packet::kPayloadBytes;
  for (uint64_t p = tid; p < nPackets; p += nThreads) {
    uint32_t v[2] = {0, 0};
    const PacketWait w = awaitPacket(src, p, flag, ctx, v, absent);
    if (w == PacketWait::Failed) return false;
    if (w == PacketWait::Absent) continue;
    if constexpr (sizeof(Packet) == 16) {
      if (aligned8 && (p + 1) * 8 <= bytes) {
        reinterpret_cast<uint2*>(d)[p] = make_uint2(v[0], v[1]);
      } else {
        detail::storePayloadWord(d, bytes, 2 * p, v[0], aligned4);
        detail::storePayloadWord(d, bytes, 2 * p + 1, v[1], aligned4);
      }
    } else {
      detail::storePayloadWord(d, bytes, p, v[0], aligned4);
    }
  }
  return true;
}

}  // namespace device
#endif
}  // namespace meshcomm
