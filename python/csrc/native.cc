// Native algorithms (docs/native.md): the NativeAlgorithm class (an Algorithm loaded from a user's shared
// library), its loader, and what meshcomm.compile_native needs to build such a library against this
// installation (where libmeshcomm is, which compilers and GPU architectures it was built with).
#include <dlfcn.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "meshcomm/builtin_algorithms.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"
#include "meshcomm/native_algorithm.hpp"

namespace meshcomm::python {

namespace {

// The file this process loaded libmeshcomm from (a native library links that very file).
std::string libmeshcommPath() {
  Dl_info info{};
  const bool found = dladdr(reinterpret_cast<void*>(&builtinAlgorithms), &info) != 0 && info.dli_fname;
  MESHCOMM_REQUIRE(found, "compile_native: cannot locate libmeshcomm in this process (dladdr failed)");
  return info.dli_fname;
}

nb::dict buildInfo() {
  nb::dict d;
  d["libmeshcomm"] = libmeshcommPath();
  d["cuda_compiler"] = MESHCOMM_CUDA_COMPILER;
  d["cuda_compiler_version"] = MESHCOMM_CUDA_COMPILER_VERSION;
  d["host_compiler"] = MESHCOMM_HOST_COMPILER;
  d["cuda_architectures"] = MESHCOMM_CUDA_ARCHITECTURES;
  d["native_abi_version"] = MESHCOMM_NATIVE_ABI_VERSION;
  return d;
}

// (major, minor) of a CUDA device, or None where there is none (no driver, no GPU, bad index).
std::optional<std::pair<int, int>> computeCapability(int device) {
  if (device < 0 || device >= gpuCount()) return std::nullopt;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return std::make_pair(major, minor);
}

}  // namespace

void bindNative(nb::module_& m) {
  nb::class_<NativeAlgorithm, Algorithm>(
      m, "NativeAlgorithm",
      "An Algorithm loaded from a user's shared library (meshcomm.compile_native); register it on a Comm "
      "with comm.add_algorithm before executing it")
      .def_prop_ro("library_path", &NativeAlgorithm::libraryPath)
      .def("__repr__", [](const NativeAlgorithm& a) {
        return "<meshcomm.NativeAlgorithm '" + a.name() + "' (" + collectiveName(a.collective()) + ") from " +
               a.libraryPath() + ">";
      });
  m.def(
      "_load_native_algorithm",
      [](const std::string& path, const std::string& name) {
        nb::gil_scoped_release release;
        return NativeAlgorithm::load(path, name);
      },
      nb::arg("path"), nb::arg("name"),
      "Loads a shared library exporting MESHCOMM_EXPORT_NATIVE_ALGORITHM (use meshcomm.compile_native)");
  m.def("_native_build_info", &buildInfo, "How this libmeshcomm was built (for compile_native)");
  m.def("_compute_capability", &computeCapability, nb::arg("device"),
        "(major, minor) of a CUDA device, or None where there is none");
}

}  // namespace meshcomm::python
