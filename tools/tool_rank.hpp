// Start-up shared by the multi-rank GPU tools (meshcomm-bench, meshcomm-tune, meshcomm-channel-bench).
#pragma once

#include <optional>

#include "meshcomm/bootstrap.hpp"

namespace meshcomm::tools {

constexpr int kExitSkip =
    77;  // "cannot run here" (too few GPUs or ranks); ctest and scripts treat it as a skip

// Reads the rank environment and checks that this machine can run a tool needing `minRanks` ranks, one GPU
// each. On success returns the environment and raises the bootstrap timeout (ranks that idle through a long
// run wait in the bootstrap) unless the user set one. Otherwise every rank prints the reason (the launcher
// may stop the others as soon as one exits), sets `exitCode` (2: bad environment, kExitSkip: too few GPUs or
// ranks) and returns nullopt.
std::optional<RankEnv> prepareGpuToolRank(const char* tool, const char* argv0, int minRanks, int& exitCode);

}  // namespace meshcomm::tools
