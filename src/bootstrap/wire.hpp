// Bootstrap wire encoding: little-endian integers written into and read from byte vectors, and the message
// layouts shared by the root, the ranks and the peer receiver. docs/bootstrap.md describes the protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::bootstrap {

// First 8 bytes of every handshake message: "MSHCOMM1" (the trailing digit is the protocol version).
constexpr uint64_t kWireMagic = 0x314d4d4f4348534dull;

// Handshake: challenge {magic, nonce}; proof {magic, rank i32, nonce, mac}; answer {mac}.
constexpr size_t kChallengeBytes = 16;
constexpr size_t kProofBytes = 28;
constexpr size_t kAnswerBytes = 8;
// The acceptor rank that the rendezvous root proves itself as.
constexpr int kRootRank = -1;

// Rank -> root after the handshake: {nRanks i32, endpoint}.
constexpr size_t kEndpointBytes = 28;  // {family u16, port u16, address[16], hostId u64}
constexpr size_t kHelloBytes = 4 + kEndpointBytes;
// Root -> rank: {kind u32, count u32}, then count endpoints (table) or count bytes of text (error).
constexpr size_t kReplyHeaderBytes = 8;
constexpr uint32_t kReplyTable = 1;
constexpr uint32_t kReplyError = 2;
constexpr uint32_t kMaxReplyText = 4096;

// Peer data frame header: {tag i32, length u64}, then `length` payload bytes.
constexpr size_t kFrameHeaderBytes = 12;

class WireWriter {
 public:
  WireWriter& u16(uint16_t v) { return le(v, 2); }
  WireWriter& u32(uint32_t v) { return le(v, 4); }
  WireWriter& i32(int32_t v) { return le(static_cast<uint32_t>(v), 4); }
  WireWriter& u64(uint64_t v) { return le(v, 8); }
  WireWriter& bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_.insert(out_.end(), p, p + n);
    return *this;
  }
  const std::vector<uint8_t>& data() const { return out_; }

 private:
  WireWriter& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> out_;
};

// Reads from a buffer whose size the caller has already checked against the message layout, so running past
// the end is a meshcomm bug.
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  explicit WireReader(const std::vector<uint8_t>& v) : WireReader(v.data(), v.size()) {}
  uint16_t u16() { return static_cast<uint16_t>(le(2)); }
  uint32_t u32() { return static_cast<uint32_t>(le(4)); }
  int32_t i32() { return static_cast<int32_t>(static_cast<uint32_t>(le(4))); }
  uint64_t u64() { return le(8); }
  void bytes(void* dst, size_t n) {
    need(n);
    std::memcpy(dst, p_, n);
    p_ += n;
    left_ -= n;
  }

 private:
  void need(size_t n) const {
    if (n > left_) MESHCOMM_THROW(ErrorCode::InternalError, "bootstrap wire message shorter than its layout");
  }
  uint64_t le(int n) {
    need(static_cast<size_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p_[i];
    p_ += n;
    left_ -= static_cast<size_t>(n);
    return v;
  }
  const uint8_t* p_;
  size_t left_;
};

// Where a rank listens for peer connections, and the id of its host.
struct Endpoint {
  net::SockAddr addr;
  uint64_t hostId = 0;
};

inline void writeEndpoint(WireWriter& w, const Endpoint& e) {
  auto bytes = e.addr.addressBytes();
  w.u16(static_cast<uint16_t>(e.addr.family()))
      .u16(e.addr.port())
      .bytes(bytes.data(), bytes.size())
      .u64(e.hostId);
}

// nullopt when the family is neither IPv4 nor IPv6 or the port is 0.
inline std::optional<Endpoint> readEndpoint(WireReader& r) {
  uint16_t family = r.u16();
  uint16_t port = r.u16();
  std::array<uint8_t, 16> bytes{};
  r.bytes(bytes.data(), bytes.size());
  uint64_t hostId = r.u64();
  if ((family != AF_INET && family != AF_INET6) || port == 0) return std::nullopt;
  return Endpoint{net::SockAddr::fromBytes(family, bytes, port), hostId};
}

// ---- decoders of the messages a peer controls (pure: no I/O; fuzzed by tests/fuzz/fuzz_bootstrap_wire.cc)
// ---- Each throws Error(RemoteError) starting with `what` for bytes that are not such a message.

inline void requireSize(size_t got, size_t want, const char* message, const std::string& what) {
  if (got != want)
    MESHCOMM_THROW(ErrorCode::RemoteError, what, ": ", message, " of ", got, " bytes, expected ", want);
}

// Rank -> root: the number of ranks the rank was started with and its peer endpoint (nullopt when invalid).
struct Hello {
  int32_t nRanks = 0;
  std::optional<Endpoint> endpoint;
};

inline Hello decodeHello(const std::vector<uint8_t>& bytes, const std::string& what) {
  requireSize(bytes.size(), kHelloBytes, "hello", what);
  WireReader r(bytes);
  Hello h;
  h.nRanks = r.i32();
  h.endpoint = readEndpoint(r);
  return h;
}

// Peer -> peer: the header of one data frame (the payload's length is checked by the receiver's limit).
struct FrameHeader {
  int32_t tag = 0;
  uint64_t length = 0;
};

inline FrameHeader decodeFrameHeader(const std::vector<uint8_t>& bytes, const std::string& what) {
  requireSize(bytes.size(), kFrameHeaderBytes, "frame header", what);
  WireReader r(bytes);
  FrameHeader h;
  h.tag = r.i32();
  h.length = r.u64();
  return h;
}

// Root -> rank: the reply header ({kind, count}).
struct ReplyHeader {
  uint32_t kind = 0;
  uint32_t count = 0;
};

inline ReplyHeader decodeReplyHeader(const uint8_t* bytes, size_t size, const std::string& what) {
  requireSize(size, kReplyHeaderBytes, "reply header", what);
  WireReader r(bytes, size);
  ReplyHeader h;
  h.kind = r.u32();
  h.count = r.u32();
  return h;
}

// Root -> rank: the rank table of `count` endpoints, every one valid.
inline std::vector<Endpoint> decodeRankTable(const std::vector<uint8_t>& bytes, uint32_t count,
                                             const std::string& what) {
  requireSize(bytes.size(), static_cast<size_t>(count) * kEndpointBytes, "rank table", what);
  WireReader r(bytes);
  std::vector<Endpoint> table;
  table.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    std::optional<Endpoint> e = readEndpoint(r);
    if (!e) MESHCOMM_THROW(ErrorCode::RemoteError, what, ": the root sent an invalid endpoint for rank ", i);
    table.push_back(*e);
  }
  return table;
}

}  // namespace meshcomm::bootstrap
