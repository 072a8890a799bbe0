// Plans (docs/dsl.md): the PlanAlgorithm class (an execution plan, written with meshcomm.dsl, as an
// Algorithm) and the Executor handle Algorithm.execute takes.
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "meshcomm/plan_algorithm.hpp"

namespace meshcomm::python {

void bindPlans(nb::module_& m) {
  nb::class_<PlanAlgorithm, Algorithm>(
      m, "PlanAlgorithm",
      "An execution plan (meshcomm.plan JSON, written with meshcomm.dsl) as an Algorithm; register it on a "
      "Comm "
      "with comm.add_algorithm (every rank, the same plan) before executing it")
      .def_static(
          "load",
          [](const std::string& path) {
            nb::gil_scoped_release release;
            return PlanAlgorithm::load(path);
          },
          nb::arg("path"), "Loads and checks a plan file (errors name the file and the JSON path)")
      .def_static("from_json", &PlanAlgorithm::fromJson, nb::arg("text"),
                  "Loads and checks a plan's JSON text")
      .def_prop_ro("num_ranks", [](const PlanAlgorithm& a) { return a.plan().numRanks; })
      .def_prop_ro(
          "protocol",
          [](const PlanAlgorithm& a) { return a.plan().protocol == plan::Protocol::LL ? "LL" : "Simple"; })
      .def_prop_ro("inplace", [](const PlanAlgorithm& a) { return a.plan().inplace; })
      .def_prop_ro("message_range",
                   [](const PlanAlgorithm& a) {
                     return nb::make_tuple(a.plan().minMessageSize, a.plan().maxMessageSize);
                   })
      .def("__repr__", [](const PlanAlgorithm& a) {
        return "<meshcomm.PlanAlgorithm '" + a.name() + "' (" + collectiveName(a.collective()) + ", " +
               std::to_string(a.plan().numRanks) + " ranks)>";
      });
}

}  // namespace meshcomm::python
