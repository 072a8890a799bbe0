// SelectionPlan: MESHCOMM_ALGO forcing, rule matching and the registration-order fallback.
#include "collectives/selection_plan.hpp"

#include <sstream>

#include "base/bounded_text.hpp"
#include "collectives/selection_table_error.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm {

namespace {

constexpr const char* kAlgoVar = "MESHCOMM_ALGO";

bool parseCollectiveName(const std::string& s, Collective& out) {
  for (int i = 0; i < kNumCollectives; ++i) {
    if (s == collectiveName(static_cast<Collective>(i))) {
      out = static_cast<Collective>(i);
      return true;
    }
  }
  return false;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// "rank R: allreduce (1048576 bytes, float, out-of-place)"
std::string describeCall(const CollectiveArgs& args, const CommTopology& topo) {
  std::ostringstream os;
  os << "rank " << topo.rank << ": " << collectiveName(args.collective) << " ("
     << args.messageBytes(topo.nRanks) << " bytes, " << dataTypeName(args.dtype) << ", "
     << (args.inPlace(topo.rank) ? "in-place" : "out-of-place") << (args.capturing ? ", capturing" : "")
     << ")";
  return os.str();
}

// "a, b, c": the names of `algorithms`, in order.
std::string algorithmNames(const std::vector<std::shared_ptr<Algorithm>>& algorithms) {
  std::string names;
  for (const auto& a : algorithms) names += (names.empty() ? "" : ", ") + a->name();
  return names;
}

// "known allreduce algorithms: a, b", or "no allreduce algorithm is registered".
std::string knownAlgorithms(Collective collective, const AlgorithmCollection& algorithms) {
  const char* name = collectiveName(collective);
  const std::string known = algorithmNames(algorithms.forCollective(collective));
  return known.empty() ? detail::concat("no ", name, " algorithm is registered")
                       : detail::concat("known ", name, " algorithms: ", known);
}

// The algorithm rule `index` names: registered, and of the rule's collective; else an error naming the rule,
// the name and the collection's algorithms of that collective.
std::shared_ptr<Algorithm> resolveRule(const SelectorRule& rule, size_t index,
                                       const AlgorithmCollection& algorithms) {
  auto algorithm = algorithms.find(rule.algorithm);
  if (algorithm != nullptr && algorithm->collective() == rule.collective) return algorithm;
  const char* collective = collectiveName(rule.collective);
  const std::string knownText = knownAlgorithms(rule.collective, algorithms);
  if (algorithm == nullptr) {
    failRuleField(index, "algorithm", "unknown ", collective, " algorithm ", quotedName(rule.algorithm), " (",
                  knownText, ")");
  }
  failRuleField(index, "algorithm", quotedName(rule.algorithm), " is an algorithm of ",
                collectiveName(algorithm->collective()), ", not of ", collective, " (", knownText, ")");
}

// The algorithm MESHCOMM_ALGO forces for `collective`: registered, and of that collective; else an error
// naming the variable, the name and the collection's algorithms of the collective (plans join the collection
// through MESHCOMM_PLAN_DIR before the first plan is built).
std::shared_ptr<Algorithm> resolveForced(const std::string& name, Collective collective,
                                         const AlgorithmCollection& algorithms) {
  auto algorithm = algorithms.find(name);
  if (algorithm != nullptr && algorithm->collective() == collective) return algorithm;
  const char* coll = collectiveName(collective);
  const std::string knownText = knownAlgorithms(collective, algorithms);
  if (algorithm == nullptr) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, kAlgoVar, " forces ", coll, " algorithm '", boundedText(name),
                   "', which is not a registered ", coll, " algorithm (", knownText, ")");
  }
  MESHCOMM_THROW(ErrorCode::InvalidUsage, kAlgoVar, " forces ", coll, " algorithm '", boundedText(name),
                 "', which is not a registered ", coll, " algorithm: it is an algorithm of ",
                 collectiveName(algorithm->collective()), " (", knownText, ")");
}

}  // namespace

ForcedAlgorithms parseForcedAlgorithms(const std::string& spec) {
  ForcedAlgorithms forced;
  std::istringstream in(spec);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    entry = trim(entry);
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    const std::string coll = trim(entry.substr(0, eq));
    const std::string name = eq == std::string::npos ? "" : trim(entry.substr(eq + 1));
    Collective c;
    MESHCOMM_REQUIRE(eq != std::string::npos && !name.empty(), kAlgoVar, "='", boundedText(spec),
                     "': entry '", boundedText(entry), "' is not collective=algorithm");
    MESHCOMM_REQUIRE(parseCollectiveName(coll, c), kAlgoVar, "='", boundedText(spec),
                     "': unknown collective '", boundedText(coll), "'");
    forced[static_cast<int>(c)] = name;
  }
  return forced;
}

ForcedAlgorithms forcedAlgorithmsFromEnv() {
  const auto spec = envRaw(kAlgoVar);
  return spec ? parseForcedAlgorithms(*spec) : ForcedAlgorithms{};
}

bool ruleMatches(const SelectorRule& rule, const CollectiveArgs& args, const CommTopology& topo) {
  if (rule.collective != args.collective) return false;
  const size_t bytes = args.messageBytes(topo.nRanks);
  if (bytes < rule.minBytes || bytes > rule.maxBytes) return false;
  if (rule.worldSize != 0 && rule.worldSize != topo.nRanks) return false;
  if (rule.dtype && *rule.dtype != args.dtype) return false;
  if (rule.inPlace && *rule.inPlace != args.inPlace(topo.rank)) return false;
  if (rule.capturing && *rule.capturing != args.capturing) return false;
  return true;
}

SelectionPlan::SelectionPlan(const Selector& selector, const AlgorithmCollection& algorithms,
                             ForcedAlgorithms forced) {
  for (int i = 0; i < kNumCollectives; ++i) {
    PerCollective& pc = perCollective_[i];
    pc.forcedName = std::move(forced[i]);
    pc.candidates = algorithms.forCollective(static_cast<Collective>(i));
    if (!pc.forcedName.empty())
      pc.forced = resolveForced(pc.forcedName, static_cast<Collective>(i), algorithms);
  }
  const auto& rules = selector.rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    perCollective_[static_cast<int>(rules[i].collective)].rules.push_back(
        {rules[i], resolveRule(rules[i], i, algorithms)});
  }
}

Selection SelectionPlan::select(const CollectiveArgs& args, const CommTopology& topo) const {
  const int index = static_cast<int>(args.collective);
  MESHCOMM_REQUIRE(index >= 0 && index < kNumCollectives, "rank ", topo.rank, ": select: collective ", index,
                   " out of range");
  const PerCollective& pc = perCollective_[index];
  if (!pc.forcedName.empty()) return selectForced(pc, args, topo);
  for (const auto& r : pc.rules) {
    if (ruleMatches(r.rule, args, topo) && r.algorithm->unsupportedReason(args, topo).empty()) {
      return Selection{r.algorithm, r.rule.config};
    }
  }
  for (const auto& a : pc.candidates) {
    if (a->unsupportedReason(args, topo).empty()) return Selection{a, LaunchConfig{}};
  }
  throwNoAlgorithm(pc, args, topo);
}

Selection SelectionPlan::selectForced(const PerCollective& pc, const CollectiveArgs& args,
                                      const CommTopology& topo) const {
  // pc.forced is of args.collective: resolveForced checked it when the plan was built.
  const std::string reason = pc.forced->unsupportedReason(args, topo);
  if (!reason.empty()) {
    MESHCOMM_THROW(ErrorCode::InvalidUsage, describeCall(args, topo), ": ", kAlgoVar, " forces algorithm '",
                   boundedText(pc.forcedName), "', which cannot run this call: ", reason);
  }
  // A matching rule naming the forced algorithm still supplies its launch configuration.
  for (const auto& r : pc.rules) {
    if (r.algorithm == pc.forced && ruleMatches(r.rule, args, topo))
      return Selection{pc.forced, r.rule.config};
  }
  return Selection{pc.forced, LaunchConfig{}};
}

void SelectionPlan::throwNoAlgorithm(const PerCollective& pc, const CollectiveArgs& args,
                                     const CommTopology& topo) const {
  std::ostringstream os;
  os << describeCall(args, topo) << ": no algorithm supports this call";
  if (pc.candidates.empty()) os << " (no " << collectiveName(args.collective) << " algorithm is registered)";
  for (const auto& a : pc.candidates) os << "; " << a->name() << ": " << a->unsupportedReason(args, topo);
  MESHCOMM_THROW(ErrorCode::InvalidUsage, os.str());
}

}  // namespace meshcomm
