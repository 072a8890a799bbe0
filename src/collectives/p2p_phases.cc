// p2p_phases.hpp: the phases of a point-to-point group.
#include "collectives/p2p_phases.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

namespace meshcomm {
namespace {

// Byte ranges [begin, end) as disjoint, merged intervals keyed by begin.
class RangeSet {
 public:
  bool overlaps(uintptr_t b, uintptr_t e) const {
    auto it = ranges_.upper_bound(b);  // first range starting after b
    if (it != ranges_.end() && it->first < e) return true;
    return it != ranges_.begin() && std::prev(it)->second > b;
  }
  void add(uintptr_t b, uintptr_t e) {
    auto it = ranges_.upper_bound(b);
    if (it != ranges_.begin() && std::prev(it)->second >= b) {
      --it;
      b = it->first;
    }
    while (it != ranges_.end() && it->first <= e) {
      if (it->second > e) e = it->second;
      it = ranges_.erase(it);
    }
    ranges_.emplace(b, e);
  }
  void clear() { ranges_.clear(); }

 private:
  std::map<uintptr_t, uintptr_t> ranges_;
};

// True when some send's bytes may meet some receive's: their address spans overlap.
bool sendAndReceiveSpansMeet(const P2POp* ops, size_t count) {
  uintptr_t lo[2] = {UINTPTR_MAX, UINTPTR_MAX}, hi[2] = {0, 0};  // [Send], [Recv]
  for (size_t i = 0; i < count; ++i) {
    if (ops[i].count == 0) continue;
    const uintptr_t b = reinterpret_cast<uintptr_t>(ops[i].buffer);
    const int k = ops[i].kind == P2POp::Send ? 0 : 1;
    lo[k] = std::min(lo[k], b);
    hi[k] = std::max(hi[k], b + ops[i].count);
  }
  return lo[0] < hi[1] && lo[1] < hi[0];
}

}  // namespace

std::vector<size_t> p2pPhaseBoundaries(const P2POp* ops, size_t count, int nRanks) {
  if (!sendAndReceiveSpansMeet(ops, count)) return {};
  std::vector<size_t> boundaries;
  RangeSet received;  // bytes the current phase's receives write
  for (size_t i = 0; i < count; ++i) {
    const uintptr_t b = reinterpret_cast<uintptr_t>(ops[i].buffer), e = b + ops[i].count;
    if (ops[i].count == 0) continue;
    if (ops[i].kind == P2POp::Recv) {
      received.add(b, e);
    } else if (received.overlaps(b, e)) {
      boundaries.push_back(i);
      received.clear();
    }
  }
  if (boundaries.empty()) return boundaries;
  std::vector<int> phaseOf(static_cast<size_t>(nRanks), -1);
  size_t phase = 0;
  for (size_t i = 0; i < count; ++i) {
    if (phase < boundaries.size() && i == boundaries[phase]) ++phase;
    if (ops[i].count == 0) continue;
    int& p = phaseOf[static_cast<size_t>(ops[i].peer)];
    if (p >= 0 && p != static_cast<int>(phase)) return {};  // a peer in two phases: one launch
    p = static_cast<int>(phase);
  }
  return boundaries;
}

}  // namespace meshcomm
