// Rank and size of a torchcomms communicator (see group_rank.hpp).
#include "group_rank.hpp"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "comm_state.hpp"
#include "meshcomm/bootstrap.hpp"

namespace meshcomm::torch_backend {

namespace {

std::mutex sourceMutex;
GroupSource groupSource;

std::optional<int> readCount(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  const std::string text(v);
  const bool digits =
      !text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos;
  TORCH_CHECK(digits, "meshcomm: init: ", name, "='", text, "' is not a non-negative integer");
  return std::stoi(text);
}

}  // namespace

void setGroupSource(GroupSource source) {
  std::lock_guard<std::mutex> lock(sourceMutex);
  groupSource = std::move(source);
}

GroupRank resolveGroupRank() {
  GroupSource source;
  {
    std::lock_guard<std::mutex> lock(sourceMutex);
    source = groupSource;
  }
  if (source) {
    if (std::optional<GroupRank> group = source()) return *group;
  }
  const std::optional<int> rank = readCount("TORCHCOMM_RANK");
  const std::optional<int> size = readCount("TORCHCOMM_SIZE");
  TORCH_CHECK(rank.has_value() == size.has_value(), "meshcomm: init: ",
              rank ? "TORCHCOMM_RANK is set but TORCHCOMM_SIZE is not"
                   : "TORCHCOMM_SIZE is set but TORCHCOMM_RANK is not");
  if (rank) {
    TORCH_CHECK(*size > 0 && *rank < *size, "meshcomm: init: TORCHCOMM_RANK=", *rank,
                " is not below TORCHCOMM_SIZE=", *size);
    return {*rank, *size, "TORCHCOMM_RANK/TORCHCOMM_SIZE"};
  }
  const RankEnv env = translateErrors([] { return RankEnv::fromEnvironment(); });
  return {env.rank, env.worldSize, env.source == "torchrun" ? "RANK/WORLD_SIZE" : "the launcher's variables"};
}

}  // namespace meshcomm::torch_backend
