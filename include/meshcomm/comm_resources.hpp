// CommResources: what every built-in algorithm runs on, built once per Comm, collectively:
// a registered scratch buffer mapped on every peer, a registered LL packet buffer mapped on every peer,
// a grid of MemoryChannels (one per peer and channel index, each with its own semaphore pair), and device
// arrays of all of it. Algorithms reserve their regions in initialize() (same order on every rank, so
// offsets agree). Nothing here is allocated or exchanged per call.
//
// Channel discipline (the epoch invariant): for every (peer, channel index), every signal a rank sends
// is matched by exactly one wait on the peer in the same call, whatever the data sizes. Scratch reuse:
// an algorithm that writes into a peer's scratch first learns (through a signal of the same call) that
// the peer has finished the previous call; LL algorithms instead own their packet regions and alternate
// halves by flag parity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshcomm/algorithm.hpp"
#include "meshcomm/communicator.hpp"
#include "meshcomm/device/memory_channel_device.hpp"

namespace meshcomm {

class BufferRegistry;

struct CommResourcesConfig {
  size_t scratchBytes = 0;  // 0: MESHCOMM_SCRATCH_BYTES
  size_t packetBytes = 0;   // 0: MESHCOMM_PACKET_BYTES
  int channelsPerPeer = 0;  // 0: MESHCOMM_CHANNELS_PER_PEER
};

// Device-side view passed to kernels by value.
struct CommDeviceView {
  int rank;
  int nRanks;
  int channelsPerPeer;
  // channels[peer * channelsPerPeer + c]: dst = the peer's scratch, src = this rank's scratch,
  // packetBuffer = this rank's packet buffer. The entry of peer == rank is zeroed (unused).
  MemoryChannelDeviceHandle* channels;
  void** peerScratch;  // [nRanks]: every rank's scratch as mapped here (own at [rank])
  void** peerPackets;  // [nRanks]: every rank's packet buffer as mapped here (own at [rank])
  size_t scratchBytes;
  size_t packetBytes;
};

class CommResources {
 public:
  // Collective over the communicator. Errors name the rank and what failed (e.g. a peer not reachable
  // by CUDA IPC: multi-node runs need PortChannel algorithms, not yet built).
  CommResources(Communicator& comm, const CommResourcesConfig& config = {});
  ~CommResources();
  CommResources(const CommResources&) = delete;
  CommResources& operator=(const CommResources&) = delete;

  Communicator& communicator() const { return comm_; }
  const CommTopology& topology() const { return topology_; }
  const CommDeviceView& view() const { return view_; }

  // Reserve regions at initialize() time. Offsets are identical on every rank given the same sequence
  // of calls. Packet regions are of the per-rank packet buffer; a region is also reserved at the same
  // offset in every peer's buffer (it is where this rank's packets to that peer land).
  size_t reservePacketRegion(size_t bytes, size_t alignment = 256);
  // Bytes of the packet buffer not reserved yet (before alignment).
  size_t packetBytesFree() const { return view_.packetBytes - packetReserved_; }
  // Zeroed device words (uint64) owned by one algorithm: flags, epochs, counters; never shared.
  uint64_t* allocateDeviceWords(size_t count);
  // State that several algorithms share (e.g. the pairwise engine's stream buffers and counters): the
  // first algorithm that asks for `key` in initialize() creates it; it lives as long as the resources and
  // is destroyed after the device is synchronised, before the buffers are released.
  std::shared_ptr<void>& sharedState(const std::string& key);
  // The user buffers registered with Comm::registerBuffer (zero-copy algorithms read it in launch()).
  BufferRegistry& registry() const;
  // The connection to `peer` (CUDA IPC) under the memory channels; port channels build semaphores on it.
  std::shared_ptr<Connection> connection(int peer) const;
  // Rank r's scratch buffer as registered memory: this rank's own, a peer's as mapped here.
  const RegisteredMemory& scratchMemory(int r) const;

 private:
  Communicator& comm_;
  CommTopology topology_;
  CommDeviceView view_{};
  size_t packetReserved_ = 0;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace meshcomm
