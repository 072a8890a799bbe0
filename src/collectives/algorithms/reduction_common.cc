// Host-side helpers shared by the reduction algorithms (see reduction_common.hpp).
#include "collectives/algorithms/reduction_common.hpp"

#include <algorithm>
#include <string>

#include "meshcomm/errors.hpp"

namespace meshcomm::reduction {

LaunchConfig resolveConfig(const LaunchConfig& requested, const LaunchConfig& defaults, int maxBlocks) {
  LaunchConfig c;
  c.nBlocks = requested.nBlocks > 0 ? requested.nBlocks : defaults.nBlocks;
  c.nThreadsPerBlock =
      requested.nThreadsPerBlock > 0 ? requested.nThreadsPerBlock : defaults.nThreadsPerBlock;
  c.nBlocks = std::max(1, std::min(c.nBlocks, std::max(1, maxBlocks)));
  // Multiple of 32 in [32, kMaxThreads]: >= kMaxRanks-1, as signalAllPeers/waitAllPeers need.
  c.nThreadsPerBlock = std::max(32, std::min(kMaxThreads, c.nThreadsPerBlock / 32 * 32));
  return c;
}

LaunchConfig blocksForPacks(uint64_t packs, uint64_t packsPerBlock, int maxBlocks, int threads) {
  LaunchConfig c;
  c.nThreadsPerBlock = threads;
  const uint64_t want = ceilDiv(packs, std::max<uint64_t>(1, packsPerBlock));
  c.nBlocks = static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(want, std::max(1, maxBlocks))));
  return c;
}

std::string ReductionAlgorithm::commonReason(const CollectiveArgs& args, const CommTopology& topo) const {
  if (args.collective != collective_)
    return detail::concat("is not a ", collectiveName(collective_), " algorithm");
  if (!initialized_) return "not initialized (initialize() was not called)";
  if (topo.nRanks > kMaxRanks) return detail::concat("world size ", topo.nRanks, " > ", kMaxRanks);
  if (topo.nRanks != nRanks_) return "topology does not match the initialized resources";
  if (topo.nRanks > 1 && !topo.allPeersIpc) return "needs every peer reachable by CUDA IPC (MemoryChannels)";
  if (static_cast<int>(args.dtype) >= kNumDataTypes) return "unknown dtype";
  if (static_cast<int>(args.op.op) > static_cast<int>(ReduceOp::PreMulSum)) return "unknown reduce op";
  if (collective_ == Collective::Reduce && (args.root < 0 || args.root >= topo.nRanks))
    return "root out of range";
  return {};
}

void ReductionAlgorithm::recordResources(CommResources& resources) {
  const CommDeviceView& v = resources.view();
  rank_ = v.rank;
  nRanks_ = v.nRanks;
  channelsPerPeer_ = v.channelsPerPeer;
  scratchBytes_ = v.scratchBytes;
  packetBytes_ = v.packetBytes;
  initialized_ = true;
}

}  // namespace meshcomm::reduction
