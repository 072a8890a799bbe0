// What every benchmark JSON of the tools records about its run (bench/results/ convention): tool, date,
// device, ranks, the meshcomm commit of the source tree it was built from, and the exact command.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace meshcomm::tools {

// The command line as typed (arguments joined by spaces).
std::string commandLine(int argc, char** argv);

// {"tool", "date" (UTC, YYYY-MM-DD), "device", "ranks", "commit" (MESHCOMM_BENCH_COMMIT when set and not
// empty — a copy of the tree on another machine names the measured commit —, else the short hash of the
// source tree, "+changes" for a dirty tree, "unknown" outside a checkout), "command"}.
nlohmann::json runRecord(const std::string& tool, const std::string& device, int ranks,
                         const std::string& command);

// A measured value, or null where there is none (NaN).
nlohmann::json numberOrNull(double v);

}  // namespace meshcomm::tools
