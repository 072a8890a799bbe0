// SelectionPlan: a Selector resolved against one AlgorithmCollection and the MESHCOMM_ALGO forcing, so
// that per-call selection is a scan over small arrays (no name lookups, no allocation). Comm rebuilds it
// when the table or the collection changes; Selector::select builds one per call (tools and tests).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "meshcomm/selector.hpp"

namespace meshcomm {

// Per collective, the algorithm names MESHCOMM_ALGO forces ("allreduce=name,alltoall=name").
using ForcedAlgorithms = std::array<std::string, kNumCollectives>;
// Parses a MESHCOMM_ALGO value; throws Error(InvalidUsage) naming the variable and the bad entry.
ForcedAlgorithms parseForcedAlgorithms(const std::string& spec);
// The current MESHCOMM_ALGO (all empty when unset).
ForcedAlgorithms forcedAlgorithmsFromEnv();

// True when `rule` applies to `args` (collective, size range, world size, dtype, in-place, capturing).
bool ruleMatches(const SelectorRule& rule, const CollectiveArgs& args, const CommTopology& topo);

class SelectionPlan {
 public:
  SelectionPlan() = default;
  // Throws Error(InvalidUsage) naming the rule, the name and the registered algorithms of the rule's
  // collective when a rule names an algorithm that is not registered or is of another collective.
  SelectionPlan(const Selector& selector, const AlgorithmCollection& algorithms, ForcedAlgorithms forced);
  // Forced algorithm, else the first matching rule whose algorithm supports the call, else the first
  // supporting algorithm in registration order. Throws Error(InvalidUsage) naming rank, collective and the
  // reasons.
  Selection select(const CollectiveArgs& args, const CommTopology& topo) const;

 private:
  struct ResolvedRule {
    SelectorRule rule;
    std::shared_ptr<Algorithm> algorithm;
  };
  struct PerCollective {
    std::string forcedName;                              // MESHCOMM_ALGO entry, empty if none
    std::shared_ptr<Algorithm> forced;                   // null if none or not registered
    std::vector<ResolvedRule> rules;                     // in table order
    std::vector<std::shared_ptr<Algorithm>> candidates;  // registration order
  };

  Selection selectForced(const PerCollective& pc, const CollectiveArgs& args, const CommTopology& topo) const;
  [[noreturn]] void throwNoAlgorithm(const PerCollective& pc, const CollectiveArgs& args,
                                     const CommTopology& topo) const;

  std::array<PerCollective, kNumCollectives> perCollective_;
};

}  // namespace meshcomm
