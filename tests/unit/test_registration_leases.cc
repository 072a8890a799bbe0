// The checks a rank applies to what a peer names, on the CPU: the TCP receiver's leases on local
// registrations (only ids sent to that peer, overflow-safe ranges, deregistration waits for a transfer in
// flight), a received descriptor's owner, and same-process descriptors resolved from the owner's registry
// rather than from the pointer they carry.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/registered_memory_impl.hpp"
#include "meshcomm/errors.hpp"

using namespace meshcomm;

namespace {

// Expects `fn` to throw Error(code) whose text contains every one of `parts`.
void expectError(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
    }
  }
}

// A registry of rank 0 holding one 64-byte host registration, sent to peer 1.
struct SharedRegistration {
  SharedRegistration() : id(registry.add({buffer, sizeof(buffer), MemoryKind::Host})) {
    registry.share(id, 1, "rank 0: sendMemory to peer 1 (tag 0)");
  }
  alignas(8) char buffer[64] = {};
  LocalRegistry registry{0};
  const uint64_t id;
};

MemoryDescriptor descriptorOf(const SharedRegistration& r, int owner) {
  MemoryDescriptor d = MemoryDescriptor::make();
  d.ownerRank = owner;
  d.id = r.id;
  d.size = sizeof(r.buffer);
  d.baseSize = sizeof(r.buffer);
  d.kind = static_cast<uint8_t>(MemoryKind::Host);
  return d;
}

}  // namespace

TEST(RegistrationLease, OnlyIdsSentToThePeer) {
  SharedRegistration r;
  const std::string id = "memory id " + std::to_string(r.id);
  expectError([&] { r.registry.lease(r.id + 1000, 1, 0, 8, "write"); }, ErrorCode::RemoteError,
              {"rank 0", "write from peer 1", "memory id " + std::to_string(r.id + 1000), "not registered"});
  expectError([&] { r.registry.lease(r.id, 2, 0, 8, "update"); }, ErrorCode::RemoteError,
              {"rank 0", "update from peer 2", id, "never sent that memory to peer 2"});
  char other[16];
  const uint64_t unshared = r.registry.add({other, sizeof(other), MemoryKind::Host});
  expectError([&] { r.registry.lease(unshared, 1, 0, 8, "write"); }, ErrorCode::RemoteError,
              {"write from peer 1", "memory id " + std::to_string(unshared), "never sent"});
  expectError([&] { r.registry.share(r.id + 1000, 1, "rank 0: sendMemory to peer 1 (tag 3)"); },
              ErrorCode::InvalidUsage, {"sendMemory to peer 1 (tag 3)", "not a live registration"});
  EXPECT_EQ(r.registry.lease(r.id, 1, 8, 8, "write").target(), r.buffer + 8);
}

TEST(RegistrationLease, RangesAreOverflowSafe) {
  SharedRegistration r;
  struct Range {
    uint64_t offset, bytes;
  };
  for (Range bad : {Range{UINT64_MAX - 4, 8}, Range{8, UINT64_MAX}, Range{8, UINT64_MAX - 7}, Range{65, 0},
                    Range{60, 8}, Range{0, 65}}) {
    expectError([&] { r.registry.lease(r.id, 1, bad.offset, bad.bytes, "write"); }, ErrorCode::RemoteError,
                {"write from peer 1", "[" + std::to_string(bad.offset) + ", +" + std::to_string(bad.bytes),
                 "exceeds the registration's 64 bytes"});
  }
  EXPECT_EQ(r.registry.lease(r.id, 1, 0, 64, "write").target(), r.buffer);
  EXPECT_EQ(r.registry.lease(r.id, 1, 56, 8, "update").target(), r.buffer + 56);
  EXPECT_EQ(r.registry.lease(r.id, 1, 64, 0, "write").target(), r.buffer + 64);
}

TEST(RegistrationLease, DeregisterWaitsForTheTransferInFlight) {
  SharedRegistration r;
  std::atomic<bool> removed{false};
  std::thread deregister;
  {
    const RegistrationLease lease = r.registry.lease(r.id, 1, 0, 64, "write");
    EXPECT_FALSE(lease.revoked());
    deregister = std::thread([&] {
      r.registry.remove(r.id);
      removed.store(true);
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!lease.revoked() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(lease.revoked()) << "the deregistration never started";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(removed.load()) << "deregistration returned while a transfer into the memory was in flight";
    expectError([&] { lease.throwIfRevoked(); }, ErrorCode::RemoteError,
                {"rank 0", "write from peer 1", "memory id " + std::to_string(r.id), "deregistered"});
    expectError([&] { r.registry.lease(r.id, 1, 0, 8, "write"); }, ErrorCode::RemoteError,
                {"not registered"});  // no new transfer starts meanwhile
  }
  deregister.join();
  EXPECT_TRUE(removed.load());
  EXPECT_FALSE(r.registry.find(r.id).has_value());
  EXPECT_EQ(r.registry.liveCount(), 0u);
}

TEST(MemoryDescriptor, OwnerMustBeTheSendingPeer) {
  SharedRegistration r;
  const std::string ctx = "rank 1: recvMemory from peer 0 (tag 2)";
  const std::vector<char> forged = descriptorOf(r, 3).toBytes();
  expectError([&] { MemoryDescriptor::fromPeer(forged, 0, ctx); }, ErrorCode::RemoteError,
              {ctx, "names rank 3 as the memory's owner, not the sending peer 0"});
  EXPECT_EQ(MemoryDescriptor::fromPeer(descriptorOf(r, 0).toBytes(), 0, ctx).ownerRank, 0);
}

TEST(MemoryDescriptor, SameProcessAddressComesFromTheOwnersRegistration) {
  SharedRegistration r;
  const std::string ctx = "rank 1: recvMemory from peer 0 (tag 2)";
  MemoryDescriptor d = descriptorOf(r, 0);
  d.ownerBase = 0x1000;  // a forged pointer: never used
  d.offsetFromBase = 0;
  EXPECT_EQ(LocalRegistry::sameProcessAddress(d, 1, ctx), r.buffer);

  struct Case {
    const char* what;
    std::function<void(MemoryDescriptor&)> forge;
    int receiver;
  };
  const std::vector<Case> cases = {
      {"unknown id", [](MemoryDescriptor& m) { m.id += 1000; }, 1},
      {"another owner", [](MemoryDescriptor& m) { m.ownerRank = 2; }, 1},
      {"larger size", [](MemoryDescriptor& m) { m.size = m.baseSize = 1 << 20; }, 1},
      {"other kind", [](MemoryDescriptor& m) { m.kind = static_cast<uint8_t>(MemoryKind::DeviceCudaMalloc); },
       1},
      {"never sent to the receiver", [](MemoryDescriptor&) {}, 2},
  };
  for (const auto& c : cases) {
    MemoryDescriptor f = d;
    c.forge(f);
    SCOPED_TRACE(c.what);
    expectError([&] { LocalRegistry::sameProcessAddress(f, c.receiver, ctx); }, ErrorCode::RemoteError,
                {ctx, "no live", "id " + std::to_string(f.id)});
  }
  r.registry.remove(r.id);
  expectError([&] { LocalRegistry::sameProcessAddress(d, 1, ctx); }, ErrorCode::RemoteError, {"no live"});
}
