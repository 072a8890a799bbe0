// What a whole plan needs from a communicator, computed alike on every rank (from every rank's part of the
// plan, never this rank's alone), so that every rank reserves the same regions, runs the same prologue and
// declines the same calls.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "meshcomm/plan.hpp"

namespace meshcomm::plan {

struct PlanFacts {
  std::string reason;               // why no rank can run the plan on this communicator (empty: it can)
  bool reachesPeerBuffers = false;  // a put into / get from a peer's input or output (registered buffers)
  bool writesPeerScratch = false;   // a Simple put into / get from a peer's scratch (needs the entry barrier)
  bool reduces = false;             // a reduce or reduce_packets anywhere
  bool portChannels = false;        // a port channel anywhere (every rank builds its proxy)
  uint64_t maxScratchChunks = 0;    // over all ranks
  int maxBlocks = 0;                // over all ranks
  uint64_t packetChunkBytes = 0;    // LL: packet bytes of one scratch chunk at max_message_size
  uint64_t packetRegionBytes = 0;   // LL: both halves of maxScratchChunks chunks
};

// Units of n (elements per unit) in each rank's input and output (docs/dsl.md, "Concepts"): allreduce 1, 1;
// allgather 1, R; reduce-scatter R, 1; alltoall R, R.
std::pair<uint64_t, uint64_t> collectiveUnits(const Plan& plan);

// Elements per chunk of a call with n elements per unit (docs/dsl.md, "Chunk geometry"): ceil(n / chunks per
// unit), for Simple plans rounded up to whole kChunkLineBytes lines so every chunk and scratch slot starts on
// a line (the 16-byte vector path of the copies and reductions; whole lines). LL chunks stay exact: their
// packet region is sized for ceil(max_message_size / chunks per unit). Any c >= ceil(n / U) tiles a unit.
constexpr uint64_t kChunkLineBytes = 128;
uint64_t chunkElems(const Plan& plan, uint64_t n, uint64_t elemBytes);

// channelsPerPeer, smCount, maxThreads: the communicator's channel grid, the GPU's multiprocessors (0:
// unknown) and the executor's largest block.
PlanFacts analyzePlan(const Plan& plan, int channelsPerPeer, int smCount, int maxThreads);

}  // namespace meshcomm::plan
