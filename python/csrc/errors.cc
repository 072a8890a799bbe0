// meshcomm::Error -> Python exceptions: one class per ErrorCode under meshcomm.Error (a RuntimeError); the
// text is what() unchanged and `.code` the ErrorCode (docs/python.md).
#include <array>

#include "bindings.hpp"
#include "meshcomm/errors.hpp"

namespace meshcomm::python {

namespace {

constexpr int kNumErrorCodes = static_cast<int>(ErrorCode::InternalError) + 1;

// Created once at import; the module keeps them alive.
std::array<PyObject*, kNumErrorCodes> errorTypes{};

PyObject* newErrorType(nb::module_& m, const char* name, const char* doc, PyObject* bases) {
  const std::string qualified = std::string("meshcomm.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

void setPythonError(const Error& e) {
  nb::handle type = errorTypes[static_cast<int>(e.code())];
  nb::object exc = type(nb::str(e.what()));
  exc.attr("code") = nb::cast(e.code());
  PyErr_SetObject(type.ptr(), exc.ptr());
}

}  // namespace

void bindErrors(nb::module_& m) {
  PyObject* base = newErrorType(m, "Error", "A meshcomm error: str() is the C++ message, .code the ErrorCode",
                                PyExc_RuntimeError);
  auto derived = [&](ErrorCode code, const char* name, const char* doc, PyObject* also = nullptr) {
    nb::object bases =
        also ? nb::make_tuple(nb::handle(base), nb::handle(also)) : nb::make_tuple(nb::handle(base));
    errorTypes[static_cast<int>(code)] = newErrorType(m, name, doc, bases.ptr());
  };
  derived(ErrorCode::InvalidUsage, "InvalidUsageError",
          "The caller passed something unsupported or inconsistent");
  derived(ErrorCode::SystemError, "SystemCallError", "An OS call failed (errno in the text)");
  derived(ErrorCode::CudaError, "CudaError", "A CUDA runtime or driver call failed");
  derived(ErrorCode::Timeout, "TimeoutError", "A blocking host or device operation timed out",
          PyExc_TimeoutError);
  derived(ErrorCode::RemoteError, "RemoteError", "A peer closed, died, or sent something invalid");
  derived(ErrorCode::InternalError, "InternalError", "A bug in meshcomm");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      setPythonError(e);
    }
  });
}

}  // namespace meshcomm::python
