// Internal: the contents of a UniqueId, the bootstrap secret, randomness and the host id.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "bootstrap/socket.hpp"
#include "meshcomm/bootstrap.hpp"

namespace meshcomm::bootstrap {

// The 128-bit secret every rank proves it knows (it is also the SipHash key of the proofs).
using Secret = std::array<uint8_t, 16>;

// Who runs the rendezvous root of an id: the process that called createUniqueId, or rank 0 itself
// (uniqueIdFromAddress ids, used by launches from the environment).
enum class RootHost { IdCreator, Rank0 };

struct IdContents {
  Secret secret{};
  net::SockAddr root;
  RootHost rootHost = RootHost::IdCreator;
};

UniqueId encodeUniqueId(const IdContents& contents);
// Throws Error(InvalidUsage) starting with `who` when the bytes are not a meshcomm UniqueId.
IdContents decodeUniqueId(const UniqueId& id, const std::string& who);

// Cryptographically random bytes from getrandom().
void fillRandom(void* data, size_t bytes);
uint64_t randomU64();
Secret randomSecret();

// 32 hex digits <-> secret. parseSecretHex throws Error(InvalidUsage) naming `variable` (never the value).
Secret parseSecretHex(const std::string& text, const char* variable);
std::string secretToHex(const Secret& secret);

// A 64-bit id of this host: a hash of the host name and the kernel boot id, so that two containers on one
// machine compare equal exactly when they run on the same booted kernel.
uint64_t localHostId();

}  // namespace meshcomm::bootstrap
