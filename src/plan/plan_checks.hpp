// The per-op and cross-field rules of a parsed plan (docs/dsl.md, "The plan"): chunk bounds, channel kinds,
// packets only in LL plans, barriers, channel peers, chunk counts and message sizes.
#pragma once

#include "meshcomm/plan.hpp"

namespace meshcomm::plan::detail {

// Throws meshcomm::Error naming the plan and the JSON path of the first value that breaks a rule.
void checkPlan(const Plan& plan);

}  // namespace meshcomm::plan::detail
