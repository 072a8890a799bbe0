// The TCP transport's wire format. Pure encode/decode (no I/O), so it is unit-tested on the CPU.
//
// Every message starts with a 32-byte little-endian header:
//   magic u16 | version u8 | op u8 | reserved u32 (0) | memoryId u64 | offset u64 | value u64
// Write:  value = payload bytes; the payload follows the header.
// Update: value = the 64-bit word to store at (memoryId, offset), after every earlier write has landed.
// Flush:  value = sequence number; the receiver answers with Ack{value = same sequence number} once every
//         earlier operation has landed.
// Ack:    travels the other way, on the same socket (receiver -> sender).
//
// Connection setup (before any header) uses two more fixed messages:
//   Endpoint (over the bootstrap): magic u32 | family u16 | port u16 | address[16] | cookie[16]
//   Auth (first bytes on each data socket): magic u32 | rank i32 | cookie[16]
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace meshcomm::tcpwire {

enum class Op : uint8_t { Write = 1, Update = 2, Flush = 3, Ack = 4 };

constexpr uint16_t kHeaderMagic = 0x4d43;  // "MC"
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;

struct Header {
  Op op = Op::Write;
  uint64_t memoryId = 0;  // the receiver's registration id (Write, Update)
  uint64_t offset = 0;    // byte offset inside that registration (Write, Update)
  uint64_t value = 0;     // Write: bytes; Update: token value; Flush/Ack: sequence number
};

using HeaderBytes = std::array<uint8_t, kHeaderBytes>;

namespace detail {
inline void putLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t getLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
}  // namespace detail

inline const char* opName(Op op) {
  switch (op) {
    case Op::Write:
      return "write";
    case Op::Update:
      return "update";
    case Op::Flush:
      return "flush";
    case Op::Ack:
      return "ack";
  }
  return "?";
}

inline HeaderBytes encodeHeader(const Header& h) {
  HeaderBytes b{};
  detail::putLe(&b[0], kHeaderMagic, 2);
  b[2] = kVersion;
  b[3] = static_cast<uint8_t>(h.op);
  detail::putLe(&b[4], 0, 4);
  detail::putLe(&b[8], h.memoryId, 8);
  detail::putLe(&b[16], h.offset, 8);
  detail::putLe(&b[24], h.value, 8);
  return b;
}

// Decodes and checks magic, version, op and the reserved word. On failure returns false and says why.
inline bool decodeHeader(const HeaderBytes& b, Header* out, std::string* why) {
  const uint64_t magic = detail::getLe(&b[0], 2);
  if (magic != kHeaderMagic) {
    *why = "bad magic " + std::to_string(magic) + " (stream out of sync or not a meshcomm peer)";
    return false;
  }
  if (b[2] != kVersion) {
    *why =
        "unsupported wire version " + std::to_string(b[2]) + " (expected " + std::to_string(kVersion) + ")";
    return false;
  }
  if (b[3] < static_cast<uint8_t>(Op::Write) || b[3] > static_cast<uint8_t>(Op::Ack)) {
    *why = "unknown op " + std::to_string(b[3]);
    return false;
  }
  if (detail::getLe(&b[4], 4) != 0) {
    *why = "nonzero reserved field";
    return false;
  }
  out->op = static_cast<Op>(b[3]);
  out->memoryId = detail::getLe(&b[8], 8);
  out->offset = detail::getLe(&b[16], 8);
  out->value = detail::getLe(&b[24], 8);
  return true;
}

// ---- connection setup ----------------------------------------------------------------------------------

using Cookie = std::array<uint8_t, 16>;

constexpr uint32_t kEndpointMagic = 0x4d435045;  // "MCPE"
constexpr uint32_t kAuthMagic = 0x4d435441;      // "MCTA"
constexpr size_t kEndpointBytes = 40;
constexpr size_t kAuthBytes = 24;

// Where a rank listens for the peer's data socket, and the cookie the peer must present there.
struct Endpoint {
  uint16_t family = 0;  // AF_INET or AF_INET6
  uint16_t port = 0;
  std::array<uint8_t, 16> address{};
  Cookie cookie{};
};

inline std::array<uint8_t, kEndpointBytes> encodeEndpoint(const Endpoint& e) {
  std::array<uint8_t, kEndpointBytes> b{};
  detail::putLe(&b[0], kEndpointMagic, 4);
  detail::putLe(&b[4], e.family, 2);
  detail::putLe(&b[6], e.port, 2);
  for (size_t i = 0; i < 16; ++i) b[8 + i] = e.address[i];
  for (size_t i = 0; i < 16; ++i) b[24 + i] = e.cookie[i];
  return b;
}

inline bool decodeEndpoint(const std::array<uint8_t, kEndpointBytes>& b, Endpoint* out) {
  if (detail::getLe(&b[0], 4) != kEndpointMagic) return false;
  out->family = static_cast<uint16_t>(detail::getLe(&b[4], 2));
  out->port = static_cast<uint16_t>(detail::getLe(&b[6], 2));
  for (size_t i = 0; i < 16; ++i) out->address[i] = b[8 + i];
  for (size_t i = 0; i < 16; ++i) out->cookie[i] = b[24 + i];
  return out->port != 0;
}

// The first bytes a connecting rank sends on a data socket: its rank and the cookie the listener chose.
struct Auth {
  int32_t rank = -1;
  Cookie cookie{};
};

inline std::array<uint8_t, kAuthBytes> encodeAuth(const Auth& a) {
  std::array<uint8_t, kAuthBytes> b{};
  detail::putLe(&b[0], kAuthMagic, 4);
  detail::putLe(&b[4], static_cast<uint32_t>(a.rank), 4);
  for (size_t i = 0; i < 16; ++i) b[8 + i] = a.cookie[i];
  return b;
}

inline bool decodeAuth(const std::array<uint8_t, kAuthBytes>& b, Auth* out) {
  if (detail::getLe(&b[0], 4) != kAuthMagic) return false;
  out->rank = static_cast<int32_t>(static_cast<uint32_t>(detail::getLe(&b[4], 4)));
  for (size_t i = 0; i < 16; ++i) out->cookie[i] = b[8 + i];
  return true;
}

// Compares cookies in time independent of where they differ.
inline bool cookiesEqual(const Cookie& a, const Cookie& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace meshcomm::tcpwire
