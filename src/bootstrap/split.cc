// splitMembers and shareUniqueId (include/meshcomm/split.hpp): the bootstrap half of a split.
#include <algorithm>
#include <sstream>
#include <string>

#include "meshcomm/errors.hpp"
#include "meshcomm/split.hpp"

namespace meshcomm {

namespace {

// Bootstrap tag of the UniqueId hand-out (below the internal tag range).
constexpr int kSplitIdTag = 0x4e53504c;  // "NSPL"

struct SplitEntry {
  int32_t color;
  int32_t key;
  uint64_t signature;
};

std::string ranksText(const std::vector<int>& ranks) {
  std::ostringstream s;
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

}  // namespace

std::vector<int> splitMembers(Bootstrap& parent, const SplitRequest& request) {
  const int rank = parent.rank(), n = parent.size();
  std::vector<SplitEntry> all(n);
  all[rank] = {request.color, request.key, request.signature};
  parent.allGather(all.data(), sizeof(SplitEntry));  // first, so a bad request fails on its own rank only
  MESHCOMM_REQUIRE(request.color >= 0 || request.color == kSplitNoColor, "rank ", rank, ": split: color ",
                   request.color, " must be >= 0 or kSplitNoColor (", kSplitNoColor, ")");
  if (request.color == kSplitNoColor) return {};
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (all[r].color == request.color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  std::vector<int> agree, differ;
  for (int r : members) (all[r].signature == request.signature ? agree : differ).push_back(r);
  if (!differ.empty()) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, "rank ", rank, ": split: the members of color ", request.color,
                   " disagree on the subgroup: ranks ", ranksText(agree), " asked for one, ranks ",
                   ranksText(differ), " for another (every member must pass the same rank list)");
  }
  return members;
}

UniqueId shareUniqueId(Bootstrap& parent, const std::vector<int>& members) {
  const int rank = parent.rank();
  const auto self = std::find(members.begin(), members.end(), rank);
  MESHCOMM_REQUIRE(self != members.end(), "rank ", rank, ": split: this rank is not among the members (",
                   ranksText(members), ")");
  UniqueId id;
  if (self == members.begin()) {
    id = TcpBootstrap::createUniqueId(static_cast<int>(members.size()));
    for (size_t i = 1; i < members.size(); ++i)
      parent.send(id.bytes.data(), id.bytes.size(), members[i], kSplitIdTag);
  } else {
    parent.recv(id.bytes.data(), id.bytes.size(), members[0], kSplitIdTag);
  }
  return id;
}

}  // namespace meshcomm
