// The plan executor's prologue (run by the executor kernel before its ops, plan_peer_buffers.cuh): an entry
// barrier with every peer and, for plans that reach the peers' call buffers, the exchange of where those lie.
#pragma once

#include <cstdint>

#include "meshcomm/buffer_registry.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/plan.hpp"

namespace meshcomm::plan {

// Where a rank's input and output of this call lie in its registered buffers.
struct CallBufferDescriptor {
  int32_t inIndex;
  int32_t outIndex;
  uint64_t inOffset;
  uint64_t outOffset;
  uint64_t inBytes;
  uint64_t outBytes;
};
constexpr uint64_t kDescriptorSlotBytes = 64;
static_assert(sizeof(CallBufferDescriptor) <= kDescriptorSlotBytes, "a descriptor fits its slot");

// Bytes of the descriptor slots in every rank's packet buffer: [2 parities][nRanks sources].
inline uint64_t descriptorSlotsBytes(int nRanks) {
  return 2ull * static_cast<uint64_t>(nRanks) * kDescriptorSlotBytes;
}

// The prologue's part of a launch (by value, in PlanLaunch).
struct PeerBufferExchange {
  bool run;       // false: a plan that touches only its own buffers and the peers' packets
  bool exchange;  // false: the entry barrier alone (no descriptors)
  RegistryDeviceView registry;
  CallBufferDescriptor mine;
  uint64_t slotsOffset;  // of the descriptor slots in every rank's packet buffer
  char** peerBuffers;    // [kPlanBuffers][nRanks]: input and output rows written (null where unresolved)
  uint64_t* done;        // block 0 stores the launch's epoch here once the prologue is over
};

}  // namespace meshcomm::plan
