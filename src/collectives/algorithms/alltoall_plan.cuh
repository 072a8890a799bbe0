// The alltoall(v) plan shared by alltoall_scratch / alltoallv_scratch (pairwise scratch pipeline) and
// alltoallv_ll (LL streams with the pipeline for large pairs): AllToAllPlan<Counts>, where Counts says
// where chunk p starts and how long it is on each side (bytes = elements * dtype size):
//   UniformCounts  alltoall: chunk p at p*bytes on both sides; every side knows both directions, no header.
//   HostCounts     alltoallv, CountsLocation::Host: the four arrays are read on the host at launch and
//                  passed by value in the kernel parameters (no allocation, no copy, graph-capturable; a
//                  captured graph replays the values of capture time). Up to kMaxHostCountRanks ranks.
//   DeviceCounts   alltoallv, CountsLocation::Device: the kernel reads the arrays (device memory of this
//                  GPU) when it runs, so they may change between calls and graph replays.
// The host part (makeHostCounts) builds without nvcc (unit tests).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/algorithms/movement_common.cuh"

namespace meshcomm::movement {

constexpr int kMaxHostCountRanks = 32;

// UniformCounts, HostCounts: pure (by-value fields).
struct UniformCounts {
  static constexpr bool kHeader = false;
  uint64_t bytes;
  MESHCOMM_HOST_DEVICE_INLINE uint64_t sendBytes(int) const { return bytes; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t sendOff(int p) const { return static_cast<uint64_t>(p) * bytes; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t recvBytes(int) const { return bytes; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t recvOff(int p) const { return static_cast<uint64_t>(p) * bytes; }
};

struct HostCounts {
  static constexpr bool kHeader = true;
  uint64_t send[kMaxHostCountRanks], sendDispl[kMaxHostCountRanks];
  uint64_t recv[kMaxHostCountRanks], recvDispl[kMaxHostCountRanks];
  MESHCOMM_HOST_DEVICE_INLINE uint64_t sendBytes(int p) const { return send[p]; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t sendOff(int p) const { return sendDispl[p]; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t recvBytes(int p) const { return recv[p]; }
  MESHCOMM_HOST_DEVICE_INLINE uint64_t recvOff(int p) const { return recvDispl[p]; }
};

// Weak loads of the device arrays (written by the caller before the launch, stream-ordered).
struct DeviceCounts {
  static constexpr bool kHeader = true;
  const size_t *send, *sendDispl, *recv, *recvDispl;
  uint64_t elemBytes;
#if defined(__CUDACC__)
  __device__ uint64_t sendBytes(int p) const {
    return send[p] * elemBytes;
  }
  __device__ uint64_t sendOff(int p) const {
    return sendDispl[p] * elemBytes;
  }
  __device__ uint64_t recvBytes(int p) const {
    return recv[p] * elemBytes;
  }
  __device__ uint64_t recvOff(int p) const {
    return recvDispl[p] * elemBytes;
  }
#endif
};

// Host-side counts of a call (args.countsLocation == Host) in bytes; entries past n are zero. Throws above
// kMaxHostCountRanks ranks.
inline HostCounts makeHostCounts(const CollectiveArgs& args, int rank, int n) {
  MESHCOMM_REQUIRE(n <= kMaxHostCountRanks, "rank ", rank, ": alltoallv: host-side counts support at most ",
                   kMaxHostCountRanks, " ranks");
  const uint64_t es = dataTypeSize(args.dtype);
  HostCounts c{};
  for (int p = 0; p < n; ++p) {
    c.send[p] = args.sendCounts[p] * es;
    c.sendDispl[p] = args.sendDispls[p] * es;
    c.recv[p] = args.recvCounts[p] * es;
    c.recvDispl[p] = args.recvDispls[p] * es;
  }
  return c;
}

template <class Counts>
struct AllToAllPlan : PlanBase {
  static constexpr bool kHeader = Counts::kHeader;
  char* input;
  char* output;
  Counts counts;

#if defined(__CUDACC__)
  // active, send, recv: no memory access beyond Counts' (pure for Uniform/Host counts).
  __device__ bool active(const CommDeviceView&, int) const {
    return true;
  }
  __device__ ContigStream send(const CommDeviceView&, int peer) const {
    return {input + counts.sendOff(peer), counts.sendBytes(peer)};
  }
  __device__ ContigStream recv(const CommDeviceView&, int peer) const {
    return {output + counts.recvOff(peer), counts.recvBytes(peer)};
  }
  // This block's share of chunk [rank] (weak loads and stores, local); with counts that may disagree
  // (kHeader) a mismatch is reported once and at most the receiver's bytes are copied.
  __device__ uint64_t selfBytes(const CommDeviceView& v) const {
    return minU(counts.sendBytes(v.rank), counts.recvBytes(v.rank));
  }
  __device__ void selfCopy(const CommDeviceView& v, uint32_t part, uint32_t nParts, uint32_t tid,
                           uint32_t nt) const {
    const uint64_t sent = counts.sendBytes(v.rank), cap = counts.recvBytes(v.rank);
    if (kHeader && sent != cap && part == 0 && tid == 0)
      reportMismatch(selfSpinContext(v), v.rank, cap, sent);
    copyShare(output + counts.recvOff(v.rank), input + counts.sendOff(v.rank), minU(sent, cap), part, nParts,
              tid, nt);
  }
#endif
};

}  // namespace meshcomm::movement
