// Table-driven algorithm selection. A table is a list of rules; the first rule that matches a call and
// names an algorithm that supports it wins; with no match the first supporting algorithm of the
// collection (registration order) is used. Every rule must name a registered algorithm of its collective
// (checked when the table is resolved against a collection). Tables are JSON (docs/collectives.md), loaded
// from MESHCOMM_ALGO_TABLE or built in; MESHCOMM_ALGO forces algorithms per collective
// ("allreduce=name,...").
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshcomm/algorithm.hpp"

namespace meshcomm {

struct SelectorRule {
  Collective collective = Collective::AllReduce;
  size_t minBytes = 0;  // messageBytes range, inclusive
  size_t maxBytes = std::numeric_limits<size_t>::max();
  int worldSize = 0;              // 0: any
  std::optional<DataType> dtype;  // unset: any
  std::optional<bool> inPlace;    // unset: any
  std::optional<bool> capturing;  // unset: any
  std::string algorithm;
  LaunchConfig config;  // 0s: the algorithm's defaults
};

struct Selection {
  std::shared_ptr<Algorithm> algorithm;
  LaunchConfig config;
};

class Selector {
 public:
  Selector() = default;
  // Throws Error(InvalidUsage) naming the rule for a rule that cannot be honoured consistently (e.g. size
  // bounds on a collective whose size is rank-local).
  explicit Selector(std::vector<SelectorRule> rules);
  // Parses a table (throws Error(InvalidUsage) naming the rule index and field on malformed input; nesting
  // deeper than 32 levels is rejected while parsing, and messages are bounded in length).
  static Selector fromJson(const std::string& text);
  static Selector fromFile(const std::string& path);
  // The canonical form: every rule with its fields in name order, defaults omitted.
  std::string toJson() const;

  // Throws Error(InvalidUsage) naming the rule when it names an algorithm that `algorithms` lacks or holds
  // for another collective, and naming rank, collective and every algorithm's reason when none applies.
  Selection select(const CollectiveArgs& args, const CommTopology& topo,
                   const AlgorithmCollection& algorithms) const;
  const std::vector<SelectorRule>& rules() const { return rules_; }

 private:
  std::vector<SelectorRule> rules_;
};

}  // namespace meshcomm
