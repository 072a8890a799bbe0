// splitComm and joinSubgroup (include/meshcomm/split.hpp): a subgroup's Comm from its parent's Bootstrap.
#include <algorithm>

#include "meshcomm/split.hpp"

namespace meshcomm {

std::unique_ptr<Comm> joinSubgroup(Comm& parent, const std::vector<int>& members, const CommConfig& config) {
  Bootstrap& boot = parent.communicator().bootstrap();
  const UniqueId id = shareUniqueId(boot, members);
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), parent.rank()) - members.begin());
  auto bootstrap = std::make_shared<TcpBootstrap>(newRank, static_cast<int>(members.size()), id);
  return std::make_unique<Comm>(std::move(bootstrap), config);
}

std::unique_ptr<Comm> splitComm(Comm& parent, const SplitRequest& request, const CommConfig& config) {
  const std::vector<int> members = splitMembers(parent.communicator().bootstrap(), request);
  if (members.empty()) return nullptr;
  return joinSubgroup(parent, members, config);
}

}  // namespace meshcomm
