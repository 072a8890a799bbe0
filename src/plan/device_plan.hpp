// A rank's plan as the executor kernel reads it (docs/dsl.md, "The executor"): flat arrays of blocks, ops and
// chunk references in device memory, built once at initialize() from meshcomm::plan::Plan, and the launch
// arguments of one call.
#pragma once

#include <cstdint>

#include "plan/plan_peer_buffers.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/port_channel_device.hpp"
#include "meshcomm/device/reduce.hpp"
#include "meshcomm/device/trace.hpp"
#include "meshcomm/plan.hpp"

namespace meshcomm::plan {

// Buffers by index: input, output, scratch (BufferKind's order).
constexpr int kPlanBuffers = 3;

struct RefRecord {
  uint64_t index;  // first chunk
  uint32_t size;   // chunks
  uint8_t buffer;  // BufferKind
};

// One op. refs[firstRef]: dst (when the op has one), then src or srcs, then packets.
struct OpRecord {
  uint8_t kind;  // OpKind
  uint8_t relaxed;
  uint8_t numSrcs;
  uint8_t numPackets;
  uint8_t port;     // the op's channel is a port channel
  int32_t peer;     // the channel's peer, -1 without a channel
  int32_t channel;  // memory channel: CommDeviceView channel index (peer * channelsPerPeer + plan channel
                    // index); port channel: index into PlanLaunch::ports (the rank's plan channel index);
                    // -1 without
  uint32_t firstRef;
  uint32_t barrier;  // Barrier: the counter index of this barrier occurrence
  uint32_t members;  // Barrier: the blocks that meet
};

struct BlockRecord {
  uint32_t firstOp;
  uint32_t numOps;
  uint32_t firstRef;  // the block's refs are refs[firstRef, firstRef + numRefs), in op order
  uint32_t numRefs;
};

// The executor's device trace events (docs/trace.md), recorded by thread 0 of every block once per call (the
// call: the launch epoch): Start (the epoch read), Prologue (done), Staged (the tables in shared memory), one
// event per op when every thread of the block finished it (code kFirstOpEvent + OpKind, arg: the op's index
// in the block, mod 256), End.
enum class PlanTraceEvent : uint8_t { Start, Prologue, Staged, End };
constexpr uint32_t kFirstOpEvent = 4;

// Launch arguments of one call (by value).
struct PlanLaunch {
  CommDeviceView view;
  const BlockRecord* blocks;
  const OpRecord* ops;
  const RefRecord* refs;
  const PortChannelDeviceHandle* ports;  // by the rank's plan channel index (port channels only)
  char* const* peerBuffers;   // [kPlanBuffers][nRanks]: every rank's input, output, scratch as mapped here
  char* local[kPlanBuffers];  // this rank's input, output, scratch
  uint64_t n;                 // elements per unit
  uint64_t chunkElems;        // c = chunkElems(plan, n, elemBytes) (plan_facts.hpp)
  uint64_t chunksPerUnit;
  uint32_t elemBytes;
  uint64_t packetOffset;      // LL: the plan's packet region in every rank's packet buffer
  uint64_t packetHalfBytes;   // LL: bytes of one half of it
  uint64_t packetChunkBytes;  // LL: packet bytes of one scratch chunk
  uint64_t* epoch;            // kLLEpochWords: the launch flag (both protocols; barriers use the epoch)
  uint64_t* barriers;         // one counter per barrier occurrence
  ReduceParams red;
  PeerBufferExchange prologue;  // run before the ops (plan_peer_buffers.cuh)
  DeviceTrace trace;            // off unless MESHCOMM_TRACE is set
};

// Launches the executor for (dtype, op); false if the pair has no kernel.
bool launchPlan(const PlanLaunch& launch, int blocks, int threads, DataType dtype, ReduceOp op,
                cudaStream_t stream);

}  // namespace meshcomm::plan
