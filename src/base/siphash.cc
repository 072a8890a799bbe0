#include "siphash.hpp"

namespace meshcomm {

namespace {

uint64_t rotl(uint64_t x, int bits) {
  return (x << bits) | (x >> (64 - bits));
}

uint64_t loadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct SipState {
  uint64_t v0, v1, v2, v3;

  SipState(uint64_t k0, uint64_t k1)
      : v0(k0 ^ 0x736f6d6570736575ull),  // "somepseudorandomlygeneratedbytes"
        v1(k1 ^ 0x646f72616e646f6dull),
        v2(k0 ^ 0x6c7967656e657261ull),
        v3(k1 ^ 0x7465646279746573ull) {}

  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }

  // One message word: 2 compression rounds (the "2" of SipHash-2-4).
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }

  // 4 finalization rounds (the "4").
  uint64_t finish() {
    v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

}  // namespace

uint64_t sipHash24(const SipKey& key, const void* data, size_t len) {
  SipState s(loadLe64(key.data()), loadLe64(key.data() + 8));
  const auto* p = static_cast<const uint8_t*>(data);
  const size_t fullWords = len / 8;
  for (size_t i = 0; i < fullWords; ++i) s.absorb(loadLe64(p + 8 * i));

  // The last word holds the 0-7 remaining bytes (little-endian) and the message length mod 256 in its top
  // byte.
  uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
  const uint8_t* tail = p + 8 * fullWords;
  for (size_t i = 0; i < len % 8; ++i) last |= static_cast<uint64_t>(tail[i]) << (8 * i);
  s.absorb(last);
  return s.finish();
}

}  // namespace meshcomm
