// Algorithm, AlgorithmCollection, build_default_algorithms() and Algorithm.execute (docs/python.md).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "meshcomm/plan_algorithm.hpp"
#include "comm_handle.hpp"
#include "execute_args.hpp"
#include "meshcomm/builtin_algorithms.hpp"
#include "meshcomm/native_algorithm.hpp"

namespace meshcomm::python {

namespace {

using Extras = std::optional<std::map<std::string, uint64_t>>;

ExecuteRequest makeRequest(Collective collective, int rank, int nRanks, uintptr_t input, uintptr_t output,
                           size_t inputSize, size_t outputSize, DataType dtype, const ReduceOpSpec& op,
                           uintptr_t stream, const Extras& extras) {
  ExecuteRequest r;
  r.collective = collective;
  r.rank = rank;
  r.nRanks = nRanks;
  r.input = input;
  r.output = output;
  r.inputSize = inputSize;
  r.outputSize = outputSize;
  r.dtype = dtype;
  r.op = op;
  r.stream = stream;
  if (extras) r.extras = *extras;
  return r;
}

// A native algorithm or a plan runs only where it was registered (Comm.add_algorithm); the same name from
// another library or plan is a different algorithm.
void requireRegistered(Comm& comm, const Algorithm& algorithm, const char* op) {
  if (const auto* planned = dynamic_cast<const PlanAlgorithm*>(&algorithm)) {
    const auto registered = std::dynamic_pointer_cast<PlanAlgorithm>(comm.algorithms().find(planned->name()));
    MESHCOMM_REQUIRE(
        registered != nullptr, "rank ", comm.rank(), ": ", op, ": execute: plan '", planned->name(),
        "' is not registered on this Comm: call comm.add_algorithm(algorithm) on every rank first");
    return;
  }
  const auto* native = dynamic_cast<const NativeAlgorithm*>(&algorithm);
  if (native == nullptr) return;  // built-in: on every Comm (Comm::run names an unknown one)
  const auto registered = std::dynamic_pointer_cast<NativeAlgorithm>(comm.algorithms().find(native->name()));
  MESHCOMM_REQUIRE(registered != nullptr, "rank ", comm.rank(), ": ", op, ": execute: native algorithm '",
                   native->name(),
                   "' is not registered on this Comm: call comm.add_algorithm(algorithm) on every rank first "
                   "(or compile_native(..., comm=comm))");
  MESHCOMM_REQUIRE(registered->libraryPath() == native->libraryPath(), "rank ", comm.rank(), ": ", op,
                   ": execute: this Comm's algorithm '", native->name(), "' comes from ",
                   registered->libraryPath(), ", not from ", native->libraryPath());
}

void execute(const Algorithm& algorithm, CommHandle& handle, uintptr_t input, uintptr_t output,
             size_t inputSize, size_t outputSize, DataType dtype, const ReduceOpSpec& op, uintptr_t stream,
             nb::handle executor, int nBlocks, int nThreadsPerBlock, const Extras& extras) {
  const char* op_name = collectiveName(algorithm.collective());
  // A plan runs on the executor kernel of its PlanAlgorithm; `executor` (meshcomm.Executor or None) is the
  // integration guide's argument and selects nothing further.
  MESHCOMM_REQUIRE(executor.is_none() || nb::hasattr(executor, "_meshcomm_executor"), op_name,
                   ": execute: executor: pass a meshcomm.Executor or None");
  handle.run([&](Comm& comm) {
    MESHCOMM_REQUIRE(nBlocks >= 0 && nThreadsPerBlock >= 0, "rank ", comm.rank(), ": ", op_name,
                     ": execute: nblocks/nthreads_per_block must be >= 0 (0: the algorithm's default), got ",
                     nBlocks, "/", nThreadsPerBlock);
    requireRegistered(comm, algorithm, op_name);
    const CollectiveArgs args =
        executeArgs(makeRequest(algorithm.collective(), comm.rank(), comm.size(), input, output, inputSize,
                                outputSize, dtype, op, stream, extras));
    comm.run(args, algorithm.name(), LaunchConfig{nBlocks, nThreadsPerBlock});
  });
}

void bindAlgorithm(nb::module_& m) {
  nb::class_<Algorithm>(m, "Algorithm", "A collective implementation, registered by name in a collection")
      .def_prop_ro("name", &Algorithm::name)
      .def_prop_ro("collective", &Algorithm::collective)
      .def("__repr__",
           [](const Algorithm& a) {
             return "<meshcomm.Algorithm '" + a.name() + "' (" + collectiveName(a.collective()) + ")>";
           })
      .def("execute", &execute, nb::arg("comm"), nb::arg("input_ptr"), nb::arg("output_ptr"),
           nb::arg("input_size"), nb::arg("output_size"), nb::arg("dtype"), nb::arg("op") = ReduceOpSpec(),
           nb::arg("stream") = 0, nb::arg("executor").none() = nb::none(), nb::arg("nblocks") = 0,
           nb::arg("nthreads_per_block") = 0, nb::arg("extras").none() = nb::none(),
           "Runs this algorithm (comm's instance of this name) on raw pointers; sizes in bytes "
           "(docs/python.md)");
}

void bindCollection(nb::module_& m) {
  nb::class_<AlgorithmCollection>(m, "AlgorithmCollection",
                                  "Algorithms by unique name, in registration order")
      .def(nb::init<>())
      .def("add", &AlgorithmCollection::add, nb::arg("algorithm"),
           "Raises InvalidUsageError on a duplicate name")
      .def("find", &AlgorithmCollection::find, nb::arg("name"), "The algorithm named `name`, or None")
      .def("for_collective", &AlgorithmCollection::forCollective, nb::arg("collective"),
           "The algorithms of one collective, in registration order (the selector's fallback order)")
      .def("names",
           [](const AlgorithmCollection& c) {
             std::vector<std::string> names;
             for (const auto& a : c.all()) names.push_back(a->name());
             return names;
           })
      .def("__len__", [](const AlgorithmCollection& c) { return c.all().size(); })
      .def("__iter__", [](const AlgorithmCollection& c) { return nb::iter(nb::cast(c.all())); })
      .def("__contains__",
           [](const AlgorithmCollection& c, const std::string& name) { return c.find(name) != nullptr; })
      .def("__getitem__", [](const AlgorithmCollection& c, const std::string& name) {
        auto a = c.find(name);
        if (!a) throw nb::key_error(("no algorithm named '" + name + "'").c_str());
        return a;
      });

  m.def("build_default_algorithms", &builtinAlgorithms,
        "Every built-in algorithm, fresh, in registration order (needs no GPU); each Comm registers its own");

  // Algorithm.execute's size rules without a Comm (tests): (count, root) of the CollectiveArgs built.
  m.def(
      "_execute_args",
      [](Collective collective, int rank, int nRanks, size_t inputSize, size_t outputSize, DataType dtype,
         const Extras& extras) {
        const CollectiveArgs a = executeArgs(
            makeRequest(collective, rank, nRanks, 0, 0, inputSize, outputSize, dtype, {}, 0, extras));
        return std::make_pair(a.count, a.root);
      },
      nb::arg("collective"), nb::arg("rank"), nb::arg("n_ranks"), nb::arg("input_size"),
      nb::arg("output_size"), nb::arg("dtype"), nb::arg("extras").none() = nb::none());
}

}  // namespace

void bindAlgorithms(nb::module_& m) {
  bindAlgorithm(m);
  bindCollection(m);
}

}  // namespace meshcomm::python
