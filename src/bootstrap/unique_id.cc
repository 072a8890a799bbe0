#include "bootstrap/unique_id.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include "base/siphash.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::bootstrap {

namespace {

// UniqueId layout (little-endian): magic(8) | secret(16) | family(2) | port(2, network order) | address(16).
constexpr size_t kMagicOffset = 0;
constexpr size_t kSecretOffset = 8;
constexpr size_t kFamilyOffset = 24;
constexpr size_t kPortOffset = 26;
constexpr size_t kAddressOffset = 28;

// "meshcid" plus a byte that says who hosts the root.
constexpr uint8_t kMagicPrefix[7] = {'m', 'e', 's', 'h', 'c', 'i', 'd'};
constexpr uint8_t kRootByCreator = 'C';
constexpr uint8_t kRootByRank0 = '0';

}  // namespace

UniqueId encodeUniqueId(const IdContents& contents) {
  UniqueId id;
  auto* b = id.bytes.data();
  std::memcpy(b + kMagicOffset, kMagicPrefix, sizeof(kMagicPrefix));
  b[kMagicOffset + 7] = contents.rootHost == RootHost::Rank0 ? kRootByRank0 : kRootByCreator;
  std::memcpy(b + kSecretOffset, contents.secret.data(), contents.secret.size());
  auto family = static_cast<uint16_t>(contents.root.family());
  b[kFamilyOffset] = static_cast<uint8_t>(family);
  b[kFamilyOffset + 1] = static_cast<uint8_t>(family >> 8);
  uint16_t port = contents.root.port();
  b[kPortOffset] = static_cast<uint8_t>(port >> 8);
  b[kPortOffset + 1] = static_cast<uint8_t>(port);
  auto address = contents.root.addressBytes();
  std::memcpy(b + kAddressOffset, address.data(), address.size());
  return id;
}

IdContents decodeUniqueId(const UniqueId& id, const std::string& who) {
  const auto* b = id.bytes.data();
  uint8_t kind = b[kMagicOffset + 7];
  if (std::memcmp(b + kMagicOffset, kMagicPrefix, sizeof(kMagicPrefix)) != 0 ||
      (kind != kRootByCreator && kind != kRootByRank0)) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who,
                   ": the UniqueId is not a meshcomm id (bad magic; was it copied intact to every rank?)");
  }
  IdContents c;
  c.rootHost = kind == kRootByRank0 ? RootHost::Rank0 : RootHost::IdCreator;
  std::memcpy(c.secret.data(), b + kSecretOffset, c.secret.size());
  int family = b[kFamilyOffset] | (b[kFamilyOffset + 1] << 8);
  uint16_t port = static_cast<uint16_t>((b[kPortOffset] << 8) | b[kPortOffset + 1]);
  std::array<uint8_t, 16> address{};
  std::memcpy(address.data(), b + kAddressOffset, address.size());
  if ((family != AF_INET && family != AF_INET6) || port == 0) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, who, ": the UniqueId holds no valid root address (family ",
                   family, ", port ", port, ")");
  }
  c.root = net::SockAddr::fromBytes(family, address, port);
  return c;
}

void fillRandom(void* data, size_t bytes) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = getrandom(p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      detail::throwSystemError(errno, "getrandom()");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

uint64_t randomU64() {
  uint64_t v;
  fillRandom(&v, sizeof(v));
  return v;
}

Secret randomSecret() {
  Secret s;
  fillRandom(s.data(), s.size());
  return s;
}

Secret parseSecretHex(const std::string& text, const char* variable) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Secret s{};
  bool ok = text.size() == 2 * s.size();
  for (size_t i = 0; ok && i < s.size(); ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    if (ok) s[i] = static_cast<uint8_t>((hi << 4) | lo);
  }
  if (!ok) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, variable,
                   " must be exactly 32 hex digits (128 bits); the value set has ", text.size(),
                   " characters", text.size() == 32 ? " and a non-hex digit" : "");
  }
  return s;
}

std::string secretToHex(const Secret& secret) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : secret) {
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

uint64_t localHostId() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) detail::throwSystemError(errno, "gethostname()");
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;  // absent outside Linux /proc: host name only
  std::string identity = std::string(host) + '\n' + bootId;
  static constexpr SipKey kHostIdKey = {'m', 'e', 's', 'h', 'c', 'o', 'm', 'm',
                                        '-', 'h', 'o', 's', 't', 'i', 'd', '1'};
  return sipHash24(kHostIdKey, identity.data(), identity.size());
}

}  // namespace meshcomm::bootstrap
