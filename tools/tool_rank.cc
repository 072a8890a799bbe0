#include "tool_rank.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "meshcomm/gpu_utils.hpp"

namespace meshcomm::tools {

std::optional<RankEnv> prepareGpuToolRank(const char* tool, const char* argv0, int minRanks, int& exitCode) {
  RankEnv env;
  try {
    env = RankEnv::fromEnvironment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    exitCode = 2;
    return std::nullopt;
  }
  const int gpus = gpuCount();
  exitCode = kExitSkip;
  if (gpus < minRanks) {
    std::printf("%s: needs at least %d GPUs, found %d\n", tool, minRanks, gpus);
    return std::nullopt;
  }
  if (env.worldSize < minRanks) {
    std::printf("%s: needs at least %d ranks (run: meshcomm-run -n N -- %s)\n", tool, minRanks, argv0);
    return std::nullopt;
  }
  if (env.localWorldSize > gpus) {
    std::printf("%s: %d local ranks but only %d GPUs (one rank per GPU)\n", tool, env.localWorldSize, gpus);
    return std::nullopt;
  }
  if (const char* t = std::getenv("MESHCOMM_BOOTSTRAP_TIMEOUT"); t == nullptr || *t == '\0')
    ::setenv("MESHCOMM_BOOTSTRAP_TIMEOUT", "1800", 1);
  exitCode = 0;
  return env;
}

}  // namespace meshcomm::tools
