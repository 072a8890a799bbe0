// Plan directories (plan_directory.hpp): listing, loading, the set's hash and the agreement across ranks.
#include "plan/plan_directory.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include "base/bounded_text.hpp"
#include "base/siphash.hpp"
#include "meshcomm/env.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::plan {

namespace {

// A fixed key: the hash identifies a set of plans, it does not authenticate it.
const SipKey kPlanSetHashKey = {'m', 'e', 's', 'h', 'c', 'o', 'm', 'm',
                                '.', 'p', 'l', 'a', 'n', 's', ' ', '1'};

// How the directory appears in messages (an environment value can be long).
std::string shown(const std::string& dir) {
  return "MESHCOMM_PLAN_DIR " + quotedPath(dir);
}

std::vector<std::filesystem::path> planFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    MESHCOMM_THROW(ErrorCode::InvalidUsage, shown(dir), " is not a directory",
                   ec ? " (" + ec.message() + ")" : std::string());
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".json" || !it->is_regular_file(ec)) continue;
    MESHCOMM_REQUIRE(files.size() < kMaxPlanFiles, shown(dir), " holds more than ", kMaxPlanFiles,
                     " plan files (*.json)");
    files.push_back(it->path());
  }
  if (ec) ::meshcomm::detail::throwSystemError(ec.value(), shown(dir) + ": cannot list it");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::shared_ptr<PlanAlgorithm>> loadPlanDirectory(const std::string& dir) {
  std::vector<std::shared_ptr<PlanAlgorithm>> plans;
  std::map<std::string, std::string> fileOf;  // plan name -> file
  for (const auto& path : planFiles(dir)) {
    auto plan = PlanAlgorithm::load(path.string());
    const auto [it, added] = fileOf.emplace(plan->name(), path.string());
    MESHCOMM_REQUIRE(added, shown(dir), ": plan name '", plan->name(), "' in both ", quotedPath(it->second),
                     " and ", quotedPath(path.string()));
    plans.push_back(std::move(plan));
  }
  return plans;
}

uint64_t planSetHash(const std::vector<std::shared_ptr<PlanAlgorithm>>& plans) {
  std::string canonical;
  for (const auto& plan : plans) {
    canonical += plan->name();
    canonical += '\0';
    canonical += std::to_string(plan->hash());
    canonical += '\0';
  }
  return sipHash24(kPlanSetHashKey, canonical.data(), canonical.size());
}

const AgreementSubject kPlanDirectoryAgreement{"plan directory", "the plans",
                                               "give every rank the same MESHCOMM_PLAN_DIR contents"};

std::vector<std::shared_ptr<PlanAlgorithm>> loadAgreedPlanDirectory(Bootstrap& bootstrap) {
  using Plans = std::vector<std::shared_ptr<PlanAlgorithm>>;
  const std::optional<std::string> dir = envRaw("MESHCOMM_PLAN_DIR");
  return loadAgreed<Plans>(
      bootstrap, [&] { return dir && !dir->empty() ? loadPlanDirectory(*dir) : Plans{}; }, planSetHash,
      kPlanDirectoryAgreement);
}

}  // namespace meshcomm::plan
