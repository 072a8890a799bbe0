// Host-side pieces shared by the reduction algorithms (allreduce, reduce_scatter, reduce): the segment
// geometry (which bytes of the input each owner reduces; also used on the device), launch-config
// resolution, the common base of the Algorithm classes and the factories reduction_algorithms.cc registers.
// Device pieces: reduction_common.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "meshcomm/algorithm.hpp"
#include "meshcomm/comm_resources.hpp"
#include "meshcomm/device/macros.hpp"
#include "meshcomm/device/reduce.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::reduction {

// World sizes up to this many ranks (per-rank register arrays in the reduction loops).
constexpr int kMaxRanks = 8;
constexpr uint64_t kPackBytes = 16;
// Largest block the reduction kernels are built for (__launch_bounds__): 128 registers per thread.
constexpr int kMaxThreads = 512;
// Device words of an LL algorithm's epoch, one per block (see beginLLEpoch in reduction_common.cuh): the
// largest grid of a kernel that keeps its epoch there.
constexpr size_t kLLEpochWords = 128;

MESHCOMM_HOST_DEVICE_INLINE uint64_t ceilDiv(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}
MESHCOMM_HOST_DEVICE_INLINE uint64_t packsOf(uint64_t bytes) {
  return ceilDiv(bytes, kPackBytes);
}

// Scratch tiles hold whole multiples of this many packs (1 KiB) when they can, so that every tile, and
// every warp's 512-byte store run inside it, starts on a 128-byte line: a tile size that is not (e.g. the
// scratch divided by a block count that is not a power of two) splits each run over partial lines and
// costs NVLink bandwidth (on 4x H200 a 1 GiB pipelined allreduce lost 9% with tiles of scratch / 42).
constexpr uint64_t kTileAlignPacks = 64;
MESHCOMM_HOST_DEVICE_INLINE uint64_t alignTilePacks(uint64_t packs) {
  return packs >= kTileAlignPacks ? packs / kTileAlignPacks * kTileAlignPacks : packs;
}

// Widest access a pointer allows: 16, 8, 4 or 1 (bytes). Packs sit at 16-byte offsets from a buffer's
// start, so one pointer's class holds for all of its packs; it is uniform across threads (no divergence).
MESHCOMM_HOST_DEVICE_INLINE uint32_t alignClass(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return (a & 15) == 0 ? 16u : (a & 7) == 0 ? 8u : (a & 3) == 0 ? 4u : 1u;
}

// Which bytes of the input each owner rank p reduces ("segment p"):
//   Whole:   every segment is the whole message (one-shot: every rank reduces everything);
//   Strided: segment p = input[p*bytes, (p+1)*bytes) (reduce-scatter: `bytes` = bytes per rank);
//   Split:   the message cut into n pack-aligned segments whose pack counts differ by at most one
//            (segment p = packs [p*P/n, (p+1)*P/n) of P packs); all are non-empty when P >= n.
enum class Layout { Whole, Strided, Split };

template <Layout L>
struct Segments {
  int n;
  uint64_t bytes;
  uint64_t nPacks;

  MESHCOMM_HOST_DEVICE_INLINE Segments(int nRanks, uint64_t b) : n(nRanks), bytes(b), nPacks(packsOf(b)) {}

  MESHCOMM_HOST_DEVICE_INLINE uint64_t splitPack(int p) const {
    return nPacks * static_cast<uint64_t>(p) / static_cast<uint64_t>(n);
  }
  // Byte offset of segment p in the input (and, for Whole/Split, in the output).
  MESHCOMM_HOST_DEVICE_INLINE uint64_t start(int p) const {
    if constexpr (L == Layout::Whole) {
      return 0;
    } else if constexpr (L == Layout::Strided) {
      return static_cast<uint64_t>(p) * bytes;
    } else {
      return splitPack(p) * kPackBytes;
    }
  }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t length(int p) const {
    if constexpr (L == Layout::Split) {
      const uint64_t s = splitPack(p) * kPackBytes;
      const uint64_t e = splitPack(p + 1) * kPackBytes;
      return (e < bytes ? e : bytes) - (s < bytes ? s : bytes);
    } else {
      return bytes;
    }
  }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t packs(int p) const {
    if constexpr (L == Layout::Split) {
      return splitPack(p + 1) - splitPack(p);
    } else {
      return nPacks;
    }
  }
  // The largest segment, in packs (the per-slot capacity an algorithm needs).
  MESHCOMM_HOST_DEVICE_INLINE uint64_t maxPacks() const {
    return L == Layout::Split ? ceilDiv(nPacks, static_cast<uint64_t>(n)) : nPacks;
  }
};

// Contiguous share [begin, end) of `total` work items for block `b` of `nBlocks`.
struct BlockRange {
  uint64_t begin, end, perBlock;
  MESHCOMM_HOST_DEVICE_INLINE BlockRange(uint64_t total, uint32_t b, uint32_t nBlocks) {
    perBlock = ceilDiv(total, nBlocks);
    const uint64_t s = perBlock * b;
    begin = s < total ? s : total;
    end = s + perBlock < total ? s + perBlock : total;
  }
};

// One pack = two LL16 packets, 32 bytes of buffer. Packs are grouped by 32 (a warp's worth of consecutive
// packs): the first halves (payload bytes [16j, 16j+8)) of a group's packs are 32 consecutive packets, then
// their second halves. A warp whose lanes hold consecutive packs thus writes (and polls) two contiguous
// 512-byte runs instead of every other 16 bytes of 1 KiB twice: full 128-byte lines over NVLink.
constexpr uint64_t kPackPacketBytes = 32;  // two 16-byte LL16 packets
constexpr uint64_t kPackGroup = 32;
constexpr uint64_t kPackGroupBytes = kPackGroup * kPackPacketBytes;

// Packet index of half `h` (0, 1) of pack `pack`.
MESHCOMM_HOST_DEVICE_INLINE uint64_t packPacketIndex(uint64_t pack, uint32_t h) {
  return 2 * kPackGroup * (pack / kPackGroup) + kPackGroup * h + pack % kPackGroup;
}

// Packet bytes that hold packs [0, packs): whole groups.
MESHCOMM_HOST_DEVICE_INLINE uint64_t packRegionBytes(uint64_t packs) {
  return (packs + kPackGroup - 1) / kPackGroup * kPackGroupBytes;
}

// Resolved launch shape: requested values where given (non-zero), else defaults; threads a multiple of
// 32 in [32, kMaxThreads] (>= n-1, as signalAllPeers needs), blocks in [1, maxBlocks].
LaunchConfig resolveConfig(const LaunchConfig& requested, const LaunchConfig& defaults, int maxBlocks);
// Default shape of a kernel whose blocks share `packs` packs: one block per `packsPerBlock` packs, in
// [1, maxBlocks], `threads` threads.
LaunchConfig blocksForPacks(uint64_t packs, uint64_t packsPerBlock, int maxBlocks, int threads);

// Base of the reduction algorithms: shared applicability checks and the facts initialize() records.
class ReductionAlgorithm : public Algorithm {
 public:
  ReductionAlgorithm(std::string name, Collective collective)
      : name_(std::move(name)), collective_(collective) {}
  std::string name() const override { return name_; }
  Collective collective() const override { return collective_; }

 protected:
  // Collective, world size, IPC reachability, initialized, dtype/op known, root; empty if fine.
  std::string commonReason(const CollectiveArgs& args, const CommTopology& topo) const;
  // Records the device-view facts (call first in initialize()).
  void recordResources(CommResources& resources);
  // Runs f(ReductionTag<dtype, op>{}) (which launches the kernel), then checks the launch. Throws
  // Error(InvalidUsage) naming rank and algorithm for an unknown (dtype, op).
  template <typename F>
  void dispatch(const CollectiveArgs& args, F&& f) const {
    if (!dispatchReduction(args.dtype, args.op.op, f)) {
      MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank_, ": ", name_, ": unsupported dtype/op (",
                     static_cast<int>(args.dtype), ", ", static_cast<int>(args.op.op), ")");
    }
    MESHCOMM_CUDA_CHECK(cudaGetLastError());
  }
  static int smCountOf(const CommTopology& topo) { return topo.smCount > 0 ? topo.smCount : 132; }

  bool initialized_ = false;
  int rank_ = 0;
  int nRanks_ = 1;
  int channelsPerPeer_ = 0;
  size_t scratchBytes_ = 0;
  size_t packetBytes_ = 0;

 private:
  std::string name_;
  Collective collective_;
};

// Factories (one per algorithm file).
std::shared_ptr<Algorithm> makeAllreduceOneshotLL();
std::shared_ptr<Algorithm> makeAllreduceTwoshotLL();
std::shared_ptr<Algorithm> makeAllreduceRsag();
std::shared_ptr<Algorithm> makeAllreduceZeroCopy();
std::shared_ptr<Algorithm> makeReduceScatterLL();
std::shared_ptr<Algorithm> makeReduceScatterScratch();
std::shared_ptr<Algorithm> makeReduceScratch();
std::shared_ptr<Algorithm> makeReduceChain();
std::shared_ptr<Algorithm> makeReduceDirect();

}  // namespace meshcomm::reduction
