// Plan directories (docs/dsl.md, "Plan directories"): MESHCOMM_PLAN_DIR names a directory whose plans every
// communicator adds to its collection after the built-in algorithms, so selection tables
// (MESHCOMM_ALGO_TABLE) and MESHCOMM_ALGO can name them like any native algorithm. Every rank must find the
// same plans: the ranks agree on the set (names and plan hashes, in order) at Comm creation and fail
// together, naming the ranks that differ, when they do not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/rank_agreement.hpp"
#include "meshcomm/bootstrap.hpp"
#include "meshcomm/plan_algorithm.hpp"

namespace meshcomm::plan {

// Files a plan directory may hold (a bound on what one Comm creation loads).
constexpr size_t kMaxPlanFiles = 256;

// Every regular file named *.json in `dir`, in name order, loaded and checked (errors name the file and the
// JSON path); other files are ignored. Throws Error(InvalidUsage) for a missing directory, more than
// kMaxPlanFiles plans or two plans of the same name (naming both files).
std::vector<std::shared_ptr<PlanAlgorithm>> loadPlanDirectory(const std::string& dir);

// SipHash-2-4 of the plans' names and plan hashes, in order.
uint64_t planSetHash(const std::vector<std::shared_ptr<PlanAlgorithm>>& plans);

extern const AgreementSubject kPlanDirectoryAgreement;

// The plans of MESHCOMM_PLAN_DIR (none when it is unset), agreed on by every rank of `bootstrap` (every rank
// must call it; loadAgreed).
std::vector<std::shared_ptr<PlanAlgorithm>> loadAgreedPlanDirectory(Bootstrap& bootstrap);

}  // namespace meshcomm::plan
