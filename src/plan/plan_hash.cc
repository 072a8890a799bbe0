// The plan hash: SipHash-2-4 of the document's canonical JSON form (keys sorted, no whitespace), so ranks
// that load the same plan agree however their files are laid out.
#include "base/siphash.hpp"
#include "meshcomm/plan.hpp"
#include "plan/plan_json.hpp"

namespace meshcomm::plan {

namespace {

// A fixed key: the hash identifies a document, it does not authenticate it.
const SipKey kPlanHashKey = {'m', 'e', 's', 'h', 'c', 'o', 'm', 'm', '.', 'p', 'l', 'a', 'n', ' ', 'v', '1'};

}  // namespace

uint64_t detail::documentHash(const nlohmann::json& document) {
  const std::string canonical = document.dump();
  return sipHash24(kPlanHashKey, canonical.data(), canonical.size());
}

uint64_t planHash(std::string_view text) {
  return detail::documentHash(detail::parseJsonText(text));
}

}  // namespace meshcomm::plan
