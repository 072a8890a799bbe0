// The extension meshcomm._torchcomms_backend (pybind11, torch's copy; docs/torchcomms.md): importing it
// registers the torchcomms backend "meshcomm" (libmeshcomm_torchcomms.so). meshcomm.torchcomms, the module
// torchcomms' entry point names, imports it and installs the c10d group source.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <tuple>
#include <utility>

#include "group_rank.hpp"
#include "registration.hpp"

namespace py = pybind11;

namespace {

// The Python callable is kept for the life of the process (never destroyed: no GIL at exit).
py::object* groupSourceFunction = nullptr;

std::optional<meshcomm::torch_backend::GroupRank> groupFromPython() {
  if (groupSourceFunction == nullptr || !Py_IsInitialized()) return std::nullopt;
  py::gil_scoped_acquire gil;  // new_comm released it; this thread still has its Python frames
  const py::object answer = (*groupSourceFunction)();
  if (answer.is_none()) return std::nullopt;
  const auto [rank, size, device] = answer.cast<std::tuple<int, int, int>>();
  return meshcomm::torch_backend::GroupRank{rank, size, "torch.distributed's group being created", device};
}

}  // namespace

PYBIND11_MODULE(_torchcomms_backend, m) {
  m.doc() = "meshcomm's torchcomms backend (import meshcomm.torchcomms, or let torchcomms.new_comm load it)";
  meshcomm::torch_backend::registerBackend();
  m.attr("TORCHCOMMS_VERSION") = meshcomm::torch_backend::builtTorchcommsVersion();
  m.attr("BACKEND_ABI_VERSION") = meshcomm::torch_backend::builtBackendAbiVersion();
  m.def(
      "_set_group_source",
      [](py::object source) {
        if (groupSourceFunction == nullptr) groupSourceFunction = new py::object();
        *groupSourceFunction = std::move(source);
        meshcomm::torch_backend::setGroupSource(groupFromPython);
      },
      py::arg("source"),
      "Installs a callable returning (group_rank, group_size, cuda_device) of the c10d group the calling "
      "thread is creating, or None (docs/torchcomms.md, torch 2.11's routing)");
}
