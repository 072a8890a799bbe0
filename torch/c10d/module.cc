// The extension meshcomm._torch_backend (pybind11, torch's copy; docs/torch.md): the backend class, its
// options and the creator that meshcomm.torch registers with torch.distributed.Backend.register_backend
// (extended API: c10d passes its DistributedBackendOptions and the group's pg_options).
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <optional>
#include <string>

#include "backend.hpp"
#include "host_timing.hpp"
#include "no_gil_holder.hpp"
#include "options.hpp"

namespace py = pybind11;

namespace meshcomm::torch_backend {

namespace {

c10::intrusive_ptr<MeshcommOptions> optionsFor(const ::c10d::DistributedBackendOptions& dist,
                                               const py::object& pgOptions) {
  c10::intrusive_ptr<MeshcommOptions> options;
  if (pgOptions.is_none()) {
    options = c10::make_intrusive<MeshcommOptions>();
  } else {
    TORCH_CHECK(py::isinstance<MeshcommOptions>(pgOptions), "meshcomm: rank ", dist.group_rank,
                ": init: pg_options: expected meshcomm.torch.Options, got ",
                py::repr(pgOptions).cast<std::string>());
    options = c10::make_intrusive<MeshcommOptions>(*pgOptions.cast<c10::intrusive_ptr<MeshcommOptions>>());
  }
  options->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(dist.timeout);
  options->group_name = dist.group_id;
  options->global_ranks_in_group.assign(dist.global_ranks_in_group.begin(), dist.global_ranks_in_group.end());
  return options;
}

c10::intrusive_ptr<MeshcommBackend> createBackend(const ::c10d::DistributedBackendOptions& dist,
                                                  const py::object& pgOptions) {
  c10::intrusive_ptr<MeshcommOptions> options = optionsFor(dist, pgOptions);
  py::gil_scoped_release release;  // collective: the other ranks' store traffic must not wait on our GIL
  return c10::make_intrusive<MeshcommBackend>(dist.store, dist.group_rank, dist.group_size, options);
}

void bindOptions(py::module_& m) {
  py::class_<MeshcommOptions, ::c10d::Backend::Options, c10::intrusive_ptr<MeshcommOptions>>(
      m, "Options", "pg_options of a meshcomm process group (zero sizes: the MESHCOMM_* defaults)")
      .def(py::init([](size_t scratch, size_t packet, int channels) {
             auto o = c10::make_intrusive<MeshcommOptions>();
             o->scratchBytes = scratch;
             o->packetBytes = packet;
             o->channelsPerPeer = channels;
             return o;
           }),
           py::arg("scratch_bytes") = 0, py::arg("packet_bytes") = 0, py::arg("channels_per_peer") = 0)
      .def_readwrite("scratch_bytes", &MeshcommOptions::scratchBytes)
      .def_readwrite("packet_bytes", &MeshcommOptions::packetBytes)
      .def_readwrite("channels_per_peer", &MeshcommOptions::channelsPerPeer)
      .def("__copy__", [](const MeshcommOptions& o) { return c10::make_intrusive<MeshcommOptions>(o); })
      .def("__deepcopy__",
           [](const MeshcommOptions& o, py::dict) { return c10::make_intrusive<MeshcommOptions>(o); });
}

void bindBackend(py::module_& m) {
  py::class_<MeshcommBackend, ::c10d::Backend, NoGilHolder<MeshcommBackend>>(
      m, "MeshcommBackend", "The c10d backend 'meshcomm' (one meshcomm Comm per process group)")
      .def_property_readonly("comm_device", [](const MeshcommBackend& b) { return b.device(); })
      // dist.split_group deep-copies the parent backend's `options` as the child's pg_options.
      .def_property_readonly(
          "options",
          [](MeshcommBackend& b) {
            return c10::static_intrusive_pointer_cast<MeshcommOptions>(b.getBackendOptions());
          })
      // new_group() calls this on non-members when the world group is device-bound (an NCCL split
      // protocol); a meshcomm group bootstraps among its members only, so there is nothing to do.
      .def("perform_nocolor_split", [](MeshcommBackend&, const py::object&) {})
      // The group's state as its watchdog left it (docs/torch.md "Watchdog"): torch's ErrorType, and the
      // recorded failure's text (None while the group is healthy).
      .def("get_error", &MeshcommBackend::getError)
      .def_property_readonly(
          "failure", [](const MeshcommBackend& b) -> std::optional<std::string> { return b.failure(); })
      .def("_all_to_all_single_device_splits", &MeshcommBackend::allToAllSingleDeviceSplits,
           py::arg("output"), py::arg("input"), py::arg("output_split_sizes"), py::arg("input_split_sizes"),
           py::arg("async_op"), py::call_guard<py::gil_scoped_release>());
}

std::map<std::string, double> hostTimeAllreduceOf(::c10d::ProcessGroup& group, at::Tensor& tensor,
                                                  int calls) {
  auto backend =
      c10::dynamic_intrusive_pointer_cast<MeshcommBackend>(group.getBackend(c10::DeviceType::CUDA));
  TORCH_CHECK(backend, "meshcomm: host timing: the group's CUDA backend is not meshcomm");
  return hostTimeAllreduce(group, *backend, tensor, calls);
}

}  // namespace

}  // namespace meshcomm::torch_backend

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "meshcomm's torch.distributed backend (import meshcomm.torch to register it)";
  py::module_::import("torch.distributed");  // registers c10d's classes (Backend, Store, Work, options)
  meshcomm::torch_backend::bindOptions(m);
  meshcomm::torch_backend::bindBackend(m);
  m.def("_create_backend", &meshcomm::torch_backend::createBackend, py::arg("dist_backend_opts"),
        py::arg("pg_options"), "c10d creator (extended API) of a meshcomm process group");
  m.def("_host_time_allreduce", &meshcomm::torch_backend::hostTimeAllreduceOf, py::arg("group"),
        py::arg("tensor"), py::arg("calls"), py::call_guard<py::gil_scoped_release>(),
        "host us per call of each layer under a torch allreduce on a meshcomm group "
        "(bench/torch/host_overhead.py)");
}
