// SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012): a keyed 64-bit MAC for short
// messages. meshcomm uses it to prove knowledge of the bootstrap secret and to hash host identities.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace meshcomm {

// The 128-bit key; bytes 0-7 and 8-15 are the little-endian words k0 and k1 of the specification.
using SipKey = std::array<uint8_t, 16>;

// SipHash-2-4 of `len` bytes at `data` (null is fine when len is 0).
uint64_t sipHash24(const SipKey& key, const void* data, size_t len);

}  // namespace meshcomm
