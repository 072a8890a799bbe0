// meshcomm._meshcomm: bindings of the C++ API on raw pointers (docs/python.md). Only bindings live here; the
// implementation is the shared libmeshcomm this module links.
#include "bindings.hpp"

NB_MODULE(_meshcomm, m) {
  using namespace meshcomm::python;
  m.doc() = "meshcomm C++ bindings (use the meshcomm package, not this module)";
  m.attr("__version__") = MESHCOMM_VERSION;
  bindTypes(m);
  bindErrors(m);
  bindBootstrap(m);
  bindGpuBuffer(m);
  bindComm(m);
  bindAlgorithms(m);
  bindNative(m);
  bindPlans(m);
}
