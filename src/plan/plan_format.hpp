// The names of the plan format (ops, buffers, channel types, protocols, collectives) and the fields of each
// op.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "meshcomm/plan.hpp"

namespace meshcomm::plan::detail {

// One spelling of an enum value in the plan format.
template <typename E>
struct Named {
  E value;
  const char* name;
};

extern const std::vector<Named<OpKind>> kOpNames;
extern const std::vector<Named<BufferKind>> kBufferNames;
extern const std::vector<Named<ChannelType>> kChannelTypeNames;
extern const std::vector<Named<Protocol>> kProtocolNames;
extern const std::vector<Named<Collective>> kCollectiveNames;  // the collectives a plan may implement

// The name of `value` in `table` ("?" when absent).
template <typename E>
const char* nameOf(const std::vector<Named<E>>& table, E value) {
  for (const auto& n : table)
    if (n.value == value) return n.name;
  return "?";
}

// The names of `table`, comma-separated.
template <typename E>
std::string namesOf(const std::vector<Named<E>>& table) {
  std::string names;
  for (const auto& n : table) names += (names.empty() ? "" : ", ") + std::string(n.name);
  return names;
}

// The names of the executor's device trace event codes (device_plan.hpp, PlanTraceEvent): start, prologue,
// staged, end, then one per op kind ("op:" and its name in the format).
std::vector<std::string> traceEventNames();

// The keys an op of `kind` has besides "op" (docs/dsl.md, the op table); every one is required.
const std::vector<std::string_view>& opFields(OpKind kind);

// True when an op of `kind` has the field `field`.
bool opHasField(OpKind kind, std::string_view field);

}  // namespace meshcomm::plan::detail
