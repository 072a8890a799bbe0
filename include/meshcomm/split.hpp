// Splitting a group of ranks into subgroups with ncclCommSplit's semantics: every rank of the parent names a
// color (or kSplitNoColor) and a key; the ranks of one color form a subgroup, ordered by (key, parent rank).
// The subgroup's rank 0 creates its UniqueId and hands it to the other members over the parent's Bootstrap.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "meshcomm/bootstrap.hpp"
#include "meshcomm/comm.hpp"

namespace meshcomm {

constexpr int kSplitNoColor = -1;  // the rank joins no subgroup (NCCL_SPLIT_NOCOLOR)

struct SplitRequest {
  int color = kSplitNoColor;  // >= 0, or kSplitNoColor
  int key = 0;                // orders the members of a color (ties: parent rank)
  // A value every member of a color must agree on (e.g. a hash of the member list each one passed); a
  // difference is an error on every member of that color alike, so none of them waits for the others.
  uint64_t signature = 0;
};

// Collective over every rank of `parent`: the parent ranks that asked for the caller's color, ordered by
// (key, parent rank); empty for kSplitNoColor. Throws Error(InvalidUsage) for a negative color other than
// kSplitNoColor (on the caller only, after the exchange) and for differing signatures (naming the ranks).
std::vector<int> splitMembers(Bootstrap& parent, const SplitRequest& request);

// Among `members` only (parent ranks in new-rank order, the caller one of them): members[0] creates a
// UniqueId for members.size() ranks and sends it to each other member, which receives it. Parent ranks
// outside `members` take no part (they may be gone).
UniqueId shareUniqueId(Bootstrap& parent, const std::vector<int>& members);

// splitMembers, shareUniqueId, then the subgroup's TcpBootstrap and Comm (new rank = index in the members):
// nullptr for kSplitNoColor. Collective over the parent.
std::unique_ptr<Comm> splitComm(Comm& parent, const SplitRequest& request, const CommConfig& config);

// Members `members` (parent ranks in new-rank order, the caller among them) form a new Comm: shareUniqueId,
// then the subgroup's TcpBootstrap and Comm. Only the members take part.
std::unique_ptr<Comm> joinSubgroup(Comm& parent, const std::vector<int>& members, const CommConfig& config);

}  // namespace meshcomm
