// RankEnv::fromEnvironment: the rank layout set by torchrun, OpenMPI's mpirun or Slurm's srun.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

// The variable names one launcher sets. localSize is null for Slurm, whose per-node count needs parsing.
struct LauncherVars {
  const char* source;
  const char* rank;
  const char* size;
  const char* localRank;
  const char* localSize;
};

constexpr LauncherVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

std::optional<std::string> readVar(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

[[noreturn]] void malformed(const LauncherVars& l, const std::string& what) {
  MESHCOMM_THROW(ErrorCode::InvalidUsage, "RankEnv (", l.source, "): ", what);
}

// A decimal integer in [0, 2^31): the whole text, no sign, no spaces.
int parseCount(const LauncherVars& l, const char* name, const std::string& text) {
  bool digits =
      !text.empty() && text.size() <= 10 && text.find_first_not_of("0123456789") == std::string::npos;
  long long v = digits ? std::stoll(text) : -1;
  if (v < 0 || v > 0x7fffffff)
    malformed(l, detail::concat(name, "='", text, "' is not a non-negative integer"));
  return static_cast<int>(v);
}

int requireVar(const LauncherVars& l, const char* name) {
  auto text = readVar(name);
  if (!text) malformed(l, detail::concat(l.rank, " is set but ", name, " is not"));
  return parseCount(l, name, *text);
}

// SLURM_TASKS_PER_NODE lists per-node counts compressed as "2(x3),1"; SLURM_NODEID picks this node's entry.
int slurmTasksOnThisNode(const LauncherVars& l, const std::string& list) {
  int node = 0;
  if (auto id = readVar("SLURM_NODEID")) node = parseCount(l, "SLURM_NODEID", *id);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string entry = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t paren = entry.find("(x");
    std::string countText = entry.substr(0, paren);
    int repeat = 1;
    if (paren != std::string::npos) {
      if (entry.back() != ')') malformed(l, "SLURM_TASKS_PER_NODE='" + list + "' is malformed");
      repeat = parseCount(l, "SLURM_TASKS_PER_NODE", entry.substr(paren + 2, entry.size() - paren - 3));
    }
    int count = parseCount(l, "SLURM_TASKS_PER_NODE", countText);
    if (node < repeat) return count;
    node -= repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  malformed(l, "SLURM_TASKS_PER_NODE='" + list + "' has no entry for SLURM_NODEID");
}

// Tasks per node for Slurm: SLURM_NTASKS_PER_NODE when given, else this node's SLURM_TASKS_PER_NODE entry.
std::optional<int> slurmLocalSize(const LauncherVars& l) {
  if (auto v = readVar("SLURM_NTASKS_PER_NODE")) return parseCount(l, "SLURM_NTASKS_PER_NODE", *v);
  if (auto v = readVar("SLURM_TASKS_PER_NODE")) return slurmTasksOnThisNode(l, *v);
  return std::nullopt;
}

void validate(const LauncherVars& l, const RankEnv& e) {
  const char* localSizeName = l.localSize ? l.localSize : "SLURM_NTASKS_PER_NODE/SLURM_TASKS_PER_NODE";
  if (e.worldSize < 1) malformed(l, detail::concat(l.size, "=", e.worldSize, " must be at least 1"));
  if (e.rank >= e.worldSize) {
    malformed(l, detail::concat(l.rank, "=", e.rank, " is not below ", l.size, "=", e.worldSize));
  }
  if (e.localWorldSize < 1 || e.localWorldSize > e.worldSize) {
    malformed(
        l, detail::concat(localSizeName, "=", e.localWorldSize, " must be in 1..", l.size, "=", e.worldSize));
  }
  if (e.localRank >= e.localWorldSize) {
    malformed(l, detail::concat(l.localRank, "=", e.localRank, " is not below ", localSizeName, "=",
                                e.localWorldSize));
  }
}

RankEnv readLauncher(const LauncherVars& l, const std::string& rankText) {
  RankEnv e;
  e.source = l.source;
  e.rank = parseCount(l, l.rank, rankText);
  e.worldSize = requireVar(l, l.size);
  // Without local variables (a hand-made environment) all ranks are taken to share one node.
  auto localRank = readVar(l.localRank);
  e.localRank = localRank ? parseCount(l, l.localRank, *localRank) : e.rank;
  std::optional<int> localSize;
  if (l.localSize) {
    if (auto v = readVar(l.localSize)) localSize = parseCount(l, l.localSize, *v);
  } else {
    localSize = slurmLocalSize(l);
  }
  e.localWorldSize = localSize ? *localSize : e.worldSize;
  validate(l, e);
  return e;
}

}  // namespace

RankEnv RankEnv::fromEnvironment() {
  for (const LauncherVars& l : kLaunchers) {
    if (auto rank = readVar(l.rank)) return readLauncher(l, *rank);
  }
  RankEnv none;
  none.source = "none";
  return none;
}

}  // namespace meshcomm
