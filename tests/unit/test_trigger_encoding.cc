// CPU tests of the FIFO trigger encoding, the proxy's trigger decoding and validation, the FIFO size check,
// the proxy's append-only tables, and the TCP transport's wire format.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include "core/append_only_table.hpp"
#include "core/fifo.hpp"
#include "core/proxy_trigger.hpp"
#include "meshcomm/device/fifo_device.hpp"
#include "meshcomm/errors.hpp"
#include "transport/range_check.hpp"
#include "transport/tcp_wire.hpp"

namespace meshcomm {
namespace {

using L = TriggerLayout;
constexpr uint64_t kMaxType = (1ull << L::kTypeBits) - 1;
constexpr uint64_t kMaxChannel = L::kMaxChannels - 1;
constexpr uint64_t kMaxMemory = L::kMaxMemories - 1;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

struct Fields {
  uint64_t type, channel, src, dst, parity;
};

Fields fieldsOf(uint64_t meta) {
  return {ProxyTrigger::field(meta, L::kTypeShift, L::kTypeBits),
          ProxyTrigger::field(meta, L::kChannelShift, L::kChannelBits),
          ProxyTrigger::field(meta, L::kSrcMemoryShift, L::kMemoryBits),
          ProxyTrigger::field(meta, L::kDstMemoryShift, L::kMemoryBits),
          ProxyTrigger::field(meta, L::kParityShift, 1)};
}

TEST(TriggerEncoding, LayoutCoversTheWordWithoutOverlap) {
  EXPECT_EQ(L::kTypeShift + L::kTypeBits, L::kChannelShift);
  EXPECT_EQ(L::kChannelShift + L::kChannelBits, L::kSrcMemoryShift);
  EXPECT_EQ(L::kSrcMemoryShift + L::kMemoryBits, L::kDstMemoryShift);
  EXPECT_EQ(internal::kTriggerSpareShift, L::kDstMemoryShift + L::kMemoryBits);
  EXPECT_EQ(internal::kTriggerSpareShift + internal::kTriggerSpareBits, L::kParityShift);
  EXPECT_EQ(internal::kTriggerSpareBits, 1);
  EXPECT_EQ(L::kParityShift, 63);
  EXPECT_EQ(sizeof(ProxyTrigger), 32u);
  EXPECT_EQ(alignof(ProxyTrigger), 32u);
}

TEST(TriggerEncoding, EveryFieldRoundTripsAtItsLimit) {
  const uint64_t all = ProxyTrigger::encodeMeta(kMaxType, kMaxChannel, kMaxMemory, kMaxMemory, 1);
  EXPECT_EQ(all, kU64Max & ~(uint64_t{1} << internal::kTriggerSpareShift));  // every bit but the spare one
  const Fields f = fieldsOf(all);
  EXPECT_EQ(f.type, kMaxType);
  EXPECT_EQ(f.channel, kMaxChannel);
  EXPECT_EQ(f.src, kMaxMemory);
  EXPECT_EQ(f.dst, kMaxMemory);
  EXPECT_EQ(f.parity, 1u);
}

TEST(TriggerEncoding, OneFieldAtItsLimitLeavesTheOthersZero) {
  const Fields t = fieldsOf(ProxyTrigger::encodeMeta(kMaxType, 0, 0, 0, 0));
  EXPECT_EQ(t.type, kMaxType);
  EXPECT_EQ(t.channel + t.src + t.dst + t.parity, 0u);
  const Fields c = fieldsOf(ProxyTrigger::encodeMeta(0, kMaxChannel, 0, 0, 0));
  EXPECT_EQ(c.channel, kMaxChannel);
  EXPECT_EQ(c.type + c.src + c.dst + c.parity, 0u);
  const Fields s = fieldsOf(ProxyTrigger::encodeMeta(0, 0, kMaxMemory, 0, 0));
  EXPECT_EQ(s.src, kMaxMemory);
  EXPECT_EQ(s.type + s.channel + s.dst + s.parity, 0u);
  const Fields d = fieldsOf(ProxyTrigger::encodeMeta(0, 0, 0, kMaxMemory, 0));
  EXPECT_EQ(d.dst, kMaxMemory);
  EXPECT_EQ(d.type + d.channel + d.src + d.parity, 0u);
  const Fields p = fieldsOf(ProxyTrigger::encodeMeta(0, 0, 0, 0, 1));
  EXPECT_EQ(p.parity, 1u);
  EXPECT_EQ(p.type + p.channel + p.src + p.dst, 0u);
}

TEST(TriggerEncoding, ParityAlternatesPerLap) {
  const uint64_t size = 4;
  for (uint64_t pos = 0; pos < 4; ++pos) EXPECT_EQ(ProxyTrigger::parityAt(pos, size), 1u) << pos;
  for (uint64_t pos = 4; pos < 8; ++pos) EXPECT_EQ(ProxyTrigger::parityAt(pos, size), 0u) << pos;
  EXPECT_EQ(ProxyTrigger::parityAt(8, size), 1u);
  EXPECT_EQ(ProxyTrigger::parityAt(1, 1), 0u);  // size 1: every position is a new lap
  // Across the 2^64 wrap of positions the parity still alternates lap by lap.
  const uint64_t lastLap = kU64Max - (size - 1);
  EXPECT_NE(ProxyTrigger::parityAt(lastLap, size), ProxyTrigger::parityAt(lastLap - size, size));
}

TEST(TriggerEncoding, ZeroedAndStaleSlotsAreNotReady) {
  const uint64_t size = 8;
  // A freshly zeroed ring (meta 0) is not ready on lap 0.
  EXPECT_FALSE(internal::triggerReady(0, 0, size));
  EXPECT_FALSE(internal::triggerReady(0, size - 1, size));
  // A trigger written for position p is ready at p and stale (not ready) at p + size.
  for (uint64_t p : {0ull, 3ull, 8ull, 13ull}) {
    const uint64_t meta = ProxyTrigger::encodeMeta(kTriggerData, 1, 2, 3, ProxyTrigger::parityAt(p, size));
    EXPECT_TRUE(internal::triggerReady(meta, p, size)) << p;
    EXPECT_FALSE(internal::triggerReady(meta, p + size, size)) << p;
  }
}

TEST(TriggerEncoding, DecodeReturnsEveryField) {
  ProxyTrigger t{};
  t.srcOffset = kU64Max - 1;
  t.dstOffset = 12345;
  t.bytes = 1ull << 40;
  t.meta = ProxyTrigger::encodeMeta(kTriggerData | kTriggerFlush, kMaxChannel, 7, kMaxMemory, 0);
  const internal::DecodedTrigger d = internal::decodeTrigger(t);
  EXPECT_EQ(d.spare, 0u);
  EXPECT_EQ(d.type, kTriggerData | kTriggerFlush);
  EXPECT_EQ(d.channel, kMaxChannel);
  EXPECT_EQ(d.srcMemory, 7u);
  EXPECT_EQ(d.dstMemory, kMaxMemory);
  EXPECT_EQ(d.srcOffset, kU64Max - 1);
  EXPECT_EQ(d.dstOffset, 12345u);
  EXPECT_EQ(d.bytes, 1ull << 40);
}

// ---- checkTrigger ----------------------------------------------------------------------------------------

constexpr int kSelf = 0;
constexpr int kPeer = 1;

class CheckTrigger : public ::testing::Test {
 protected:
  // Channel 0 connects to rank 1. Memory 0: ours (1000 bytes); 1: rank 1's (2000 bytes); 2: rank 2's.
  std::vector<int> peers{kPeer};
  std::vector<internal::TriggerMemoryInfo> memories{
      {1000, kSelf, true}, {2000, kPeer, false}, {64, 2, false}};

  std::optional<std::string> check(const internal::DecodedTrigger& t) const {
    return internal::checkTrigger(
        t, peers.size(), [&](uint64_t c) { return peers.at(c); }, memories.size(),
        [&](uint64_t m) { return memories.at(m); });
  }
  static internal::DecodedTrigger data(uint64_t srcOffset, uint64_t dstOffset, uint64_t bytes) {
    return {0, kTriggerData, 0, 0, 1, srcOffset, dstOffset, bytes};
  }
};

TEST_F(CheckTrigger, AcceptsValidTriggers) {
  EXPECT_FALSE(check(data(0, 0, 1000)));
  EXPECT_FALSE(check(data(999, 1999, 1)));
  EXPECT_FALSE(check(data(1000, 2000, 0)));  // empty put at the very end
  EXPECT_FALSE(check({0, kTriggerData | kTriggerSignal | kTriggerFlush, 0, 0, 1, 10, 20, 30}));
  // Signal and flush ignore the memory fields.
  EXPECT_FALSE(check({0, kTriggerSignal, 0, kMaxMemory, kMaxMemory, kU64Max, kU64Max, kU64Max}));
  EXPECT_FALSE(check({0, kTriggerFlush, 0, 0, 0, 0, 0, 0}));
}

TEST_F(CheckTrigger, RejectsUnknownTypeAndChannel) {
  auto e = check({0, 0, 0, 0, 1, 0, 0, 8});
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("type"), std::string::npos) << *e;
  e = check({0, kTriggerSignal, 1, 0, 0, 0, 0, 0});
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("channel 1"), std::string::npos) << *e;
}

TEST_F(CheckTrigger, RejectsSpareBitsAndWideMemoryIdsPushedOnTheDevice) {
  ProxyTrigger t{};
  t.meta = ProxyTrigger::encodeMeta(kTriggerSignal, 0, 0, L::kMaxMemories, 0);  // dst id one bit too wide
  auto e = check(internal::decodeTrigger(t));
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("reserved"), std::string::npos) << *e;
}

TEST_F(CheckTrigger, RejectsUnknownMemories) {
  auto e = check({0, kTriggerData, 0, 3, 1, 0, 0, 8});
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("source memory 3"), std::string::npos) << *e;
  e = check({0, kTriggerData, 0, 0, kMaxMemory, 0, 0, 8});
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("destination memory"), std::string::npos) << *e;
}

TEST_F(CheckTrigger, RejectsWrongOwners) {
  auto e = check({0, kTriggerData, 0, 1, 1, 0, 0, 8});  // source is the peer's memory
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("belongs to rank 1"), std::string::npos) << *e;
  e = check({0, kTriggerData, 0, 0, 2, 0, 0, 8});  // destination belongs to rank 2, channel goes to rank 1
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("connects to rank 1"), std::string::npos) << *e;
  e = check({0, kTriggerData, 0, 0, 0, 0, 0, 8});  // destination is our own memory
  ASSERT_TRUE(e);
}

TEST_F(CheckTrigger, RejectsRangesPastTheEndWithoutOverflow) {
  auto e = check(data(1, 0, 1000));
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("source range [1, +1000 bytes)"), std::string::npos) << *e;
  e = check(data(0, 1001, 1000));
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("destination range"), std::string::npos) << *e;
  // offset + bytes wraps around 2^64: must still be rejected.
  EXPECT_TRUE(check(data(kU64Max, 0, 2)));
  EXPECT_TRUE(check(data(0, kU64Max - 1, 4)));
  EXPECT_TRUE(check(data(8, 0, kU64Max)));
  EXPECT_TRUE(check(data(1001, 0, 0)));  // an empty range starting past the end
}

TEST(RangeWithin, Edges) {
  EXPECT_TRUE(internal::rangeWithin(0, 0, 0));
  EXPECT_TRUE(internal::rangeWithin(0, 10, 10));
  EXPECT_TRUE(internal::rangeWithin(10, 0, 10));
  EXPECT_FALSE(internal::rangeWithin(11, 0, 10));
  EXPECT_FALSE(internal::rangeWithin(5, 6, 10));
  EXPECT_FALSE(internal::rangeWithin(kU64Max, 1, kU64Max));
  EXPECT_TRUE(internal::rangeWithin(kU64Max - 1, 1, kU64Max));
}

// ---- FIFO size -------------------------------------------------------------------------------------------

TEST(FifoSize, AcceptsPowersOfTwoUpToTheLimit) {
  EXPECT_EQ(internal::Fifo::validatedSize(1, "test"), 1u);
  EXPECT_EQ(internal::Fifo::validatedSize(512, "test"), 512u);
  EXPECT_EQ(internal::Fifo::validatedSize(int64_t{1} << 20, "test"), uint64_t{1} << 20);
}

TEST(FifoSize, RejectsOthersNamingTheSource) {
  for (int64_t bad : {int64_t{0}, int64_t{-4}, int64_t{3}, int64_t{513}, int64_t{1} << 21}) {
    try {
      internal::Fifo::validatedSize(bad, "MESHCOMM_FIFO_SIZE");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
      EXPECT_NE(std::string(e.what()).find("MESHCOMM_FIFO_SIZE"), std::string::npos) << e.what();
    }
  }
}

// ---- AppendOnlyTable -------------------------------------------------------------------------------------

TEST(AppendOnlyTable, ReaderSeesOnlyCompleteEntriesWhileAWriterAppends) {
  struct Entry {
    uint64_t a = 0, b = 0;
  };
  constexpr size_t kN = 20000;
  internal::AppendOnlyTable<Entry, 32768, 256> table;
  std::atomic<bool> done{false};
  std::atomic<size_t> bad{0};
  std::thread reader([&] {
    while (!done.load()) {
      const size_t n = table.size();
      for (size_t i = n > 64 ? n - 64 : 0; i < n; ++i) {
        if (table[i].a != i || table[i].b != ~i) bad.fetch_add(1);
      }
    }
  });
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(table.append({i, ~i}), i);
  done.store(true);
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(table.size(), kN);
  EXPECT_EQ(table[kN - 1].a, kN - 1);
}

// ---- TCP wire format -------------------------------------------------------------------------------------

TEST(TcpWire, HeaderRoundTripsEveryOpAtTheLimits) {
  for (auto op : {tcpwire::Op::Write, tcpwire::Op::Update, tcpwire::Op::Flush, tcpwire::Op::Ack}) {
    const tcpwire::Header in{op, kU64Max, kU64Max - 1, 0x0123456789abcdefull};
    const tcpwire::HeaderBytes b = tcpwire::encodeHeader(in);
    tcpwire::Header out;
    std::string why;
    ASSERT_TRUE(tcpwire::decodeHeader(b, &out, &why)) << why;
    EXPECT_EQ(out.op, in.op);
    EXPECT_EQ(out.memoryId, in.memoryId);
    EXPECT_EQ(out.offset, in.offset);
    EXPECT_EQ(out.value, in.value);
  }
}

TEST(TcpWire, HeaderIsLittleEndian) {
  const tcpwire::HeaderBytes b =
      tcpwire::encodeHeader({tcpwire::Op::Update, 0x0102, 0x03, 0x0a0b0c0d0e0f1011ull});
  EXPECT_EQ(b[0], 0x43);  // magic 0x4d43
  EXPECT_EQ(b[1], 0x4d);
  EXPECT_EQ(b[2], tcpwire::kVersion);
  EXPECT_EQ(b[3], static_cast<uint8_t>(tcpwire::Op::Update));
  EXPECT_EQ(b[8], 0x02);
  EXPECT_EQ(b[9], 0x01);
  EXPECT_EQ(b[16], 0x03);
  EXPECT_EQ(b[24], 0x11);
  EXPECT_EQ(b[31], 0x0a);
}

TEST(TcpWire, DecodeRejectsCorruptHeaders) {
  const tcpwire::HeaderBytes good = tcpwire::encodeHeader({tcpwire::Op::Write, 1, 2, 3});
  auto expectRejected = [](tcpwire::HeaderBytes b, const char* needle) {
    tcpwire::Header h;
    std::string why;
    EXPECT_FALSE(tcpwire::decodeHeader(b, &h, &why));
    EXPECT_NE(why.find(needle), std::string::npos) << why;
  };
  auto b = good;
  b[0] ^= 1;
  expectRejected(b, "magic");
  b = good;
  b[2] = tcpwire::kVersion + 1;
  expectRejected(b, "version");
  b = good;
  b[3] = 0;
  expectRejected(b, "op");
  b[3] = 5;
  expectRejected(b, "op");
  b = good;
  b[6] = 1;
  expectRejected(b, "reserved");
}

TEST(TcpWire, EndpointAndAuthRoundTrip) {
  tcpwire::Endpoint e;
  e.family = 10;
  e.port = 65535;
  for (size_t i = 0; i < 16; ++i) {
    e.address[i] = static_cast<uint8_t>(i + 1);
    e.cookie[i] = static_cast<uint8_t>(0xf0 + i);
  }
  tcpwire::Endpoint e2;
  ASSERT_TRUE(tcpwire::decodeEndpoint(tcpwire::encodeEndpoint(e), &e2));
  EXPECT_EQ(e2.family, e.family);
  EXPECT_EQ(e2.port, e.port);
  EXPECT_EQ(e2.address, e.address);
  EXPECT_EQ(e2.cookie, e.cookie);

  auto bytes = tcpwire::encodeEndpoint(e);
  bytes[0] ^= 1;
  EXPECT_FALSE(tcpwire::decodeEndpoint(bytes, &e2));
  e.port = 0;
  EXPECT_FALSE(tcpwire::decodeEndpoint(tcpwire::encodeEndpoint(e), &e2));

  const tcpwire::Auth a{1234567, e.cookie};
  tcpwire::Auth a2;
  ASSERT_TRUE(tcpwire::decodeAuth(tcpwire::encodeAuth(a), &a2));
  EXPECT_EQ(a2.rank, a.rank);
  EXPECT_TRUE(tcpwire::cookiesEqual(a2.cookie, a.cookie));
  auto authBytes = tcpwire::encodeAuth(a);
  authBytes[2] ^= 0x80;
  EXPECT_FALSE(tcpwire::decodeAuth(authBytes, &a2));
}

TEST(TcpWire, CookiesDifferingInAnyByteAreUnequal) {
  tcpwire::Cookie a{};
  for (size_t i = 0; i < a.size(); ++i) {
    tcpwire::Cookie b = a;
    b[i] = 1;
    EXPECT_FALSE(tcpwire::cookiesEqual(a, b)) << i;
  }
  EXPECT_TRUE(tcpwire::cookiesEqual(a, a));
}

}  // namespace
}  // namespace meshcomm
