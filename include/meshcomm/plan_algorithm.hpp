// PlanAlgorithm: an execution plan (a `meshcomm.plan` JSON document, written with meshcomm.dsl) as an
// Algorithm of a communicator's collection, run by the plan executor kernel (docs/dsl.md, "The executor"). It
// is selected and forced like any built-in algorithm, and runs from Python with Algorithm.execute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "meshcomm/algorithm.hpp"
#include "meshcomm/plan.hpp"

namespace meshcomm {

class PlanAlgorithm final : public Algorithm {
 public:
  // Loads and checks the plan (errors name the file and the JSON path).
  static std::shared_ptr<PlanAlgorithm> load(const std::string& path);
  static std::shared_ptr<PlanAlgorithm> fromJson(const std::string& text);
  ~PlanAlgorithm() override;

  // A new instance of the same plan, not initialised (an instance belongs to one communicator).
  std::shared_ptr<PlanAlgorithm> freshInstance() const;
  const plan::Plan& plan() const;
  uint64_t hash() const;  // the plan document's plan::planHash (ranks agree on it at initialize)

  std::string name() const override;
  Collective collective() const override;
  // Collective: the ranks compare the plan's hash (a rank with another plan fails naming both ranks), then
  // each builds its rank's device plan and reserves the plan's packet region, epoch and barrier words.
  void initialize(CommResources& resources) override;
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override;
  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override;
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void* context) override;

  struct Source;  // the parsed plan and its text's hash, shared by fresh instances
  explicit PlanAlgorithm(std::shared_ptr<const Source> source);  // use load() / fromJson()

 private:
  struct State;
  std::shared_ptr<const Source> source_;
  std::unique_ptr<State> state_;
};

}  // namespace meshcomm
