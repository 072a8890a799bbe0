// libFuzzer target for the selection-table loader: every input goes through Selector::fromJson; a table that
// loads must survive its canonical form (toJson loads again to the same text), hash, and resolution against a
// collection. meshcomm::Error is the expected way to reject an input; any other exception, a crash, a
// sanitizer report or an error message over the length cap is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/bounded_text.hpp"
#include "collectives/selection_plan.hpp"
#include "collectives/rank_agreement.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/selector.hpp"

namespace {

using namespace meshcomm;

// An algorithm that supports every call; only its name and collective matter here.
class NamedAlgorithm : public Algorithm {
 public:
  NamedAlgorithm(std::string name, Collective c) : name_(std::move(name)), collective_(c) {}
  std::string name() const override { return name_; }
  Collective collective() const override { return collective_; }
  std::string unsupportedReason(const CollectiveArgs&, const CommTopology&) const override { return {}; }
  LaunchConfig defaultConfig(const CollectiveArgs&, const CommTopology&) const override { return {}; }
  void launch(CommResources&, const CollectiveArgs&, const LaunchConfig&, void*) override {}

 private:
  std::string name_;
  Collective collective_;
};

// "x" and "<collective>_x" of every collective.
const AlgorithmCollection& collection() {
  static const AlgorithmCollection algorithms = [] {
    AlgorithmCollection c;
    c.add(std::make_shared<NamedAlgorithm>("x", Collective::AllReduce));
    for (int i = 0; i < kNumCollectives; ++i) {
      const auto coll = static_cast<Collective>(i);
      c.add(std::make_shared<NamedAlgorithm>(std::string(collectiveName(coll)) + "_x", coll));
    }
    return c;
  }();
  return algorithms;
}

void checkBounded(const Error& e) {
  if (std::string(e.what()).size() > kMaxErrorMessage + 64) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const Selector selector = Selector::fromJson(text);
    const std::string canonical = selector.toJson();
    if (Selector::fromJson(canonical).toJson() != canonical) std::abort();
    selectionTableHash(selector);
    SelectionPlan(selector, collection(), {});
  } catch (const Error& e) {
    checkBounded(e);
  }
  return 0;
}
