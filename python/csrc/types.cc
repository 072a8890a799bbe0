// Enums of the collective API and ReduceOpSpec (include/meshcomm/types.hpp, algorithm.hpp, errors.hpp).
#include <nanobind/stl/string.h>

#include <cctype>
#include <string>

#include "bindings.hpp"

#include "meshcomm/algorithm.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/types.hpp"

namespace meshcomm::python {

void bindTypes(nb::module_& m) {
  nb::enum_<DataType>(m, "DataType", "Element types of the collectives")
      .value("FLOAT32", DataType::F32)
      .value("FLOAT16", DataType::F16)
      .value("BFLOAT16", DataType::BF16)
      .value("FLOAT64", DataType::F64)
      .value("INT8", DataType::I8)
      .value("UINT8", DataType::U8)
      .value("INT32", DataType::I32)
      .value("UINT32", DataType::U32)
      .value("INT64", DataType::I64)
      .value("UINT64", DataType::U64)
      .value("FLOAT8_E4M3", DataType::F8E4M3)
      .value("FLOAT8_E5M2", DataType::F8E5M2);
  m.def("data_type_size", &dataTypeSize, nb::arg("dtype"), "Bytes per element");
  m.def("data_type_name", &dataTypeName, nb::arg("dtype"), "The nccl-tests name ('bfloat16', 'float', ...)");

  nb::enum_<ReduceOp>(m, "ReduceOp", "Reduction operators")
      .value("SUM", ReduceOp::Sum)
      .value("PROD", ReduceOp::Prod)
      .value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max)
      .value("AVG", ReduceOp::Avg)
      .value("PREMUL_SUM", ReduceOp::PreMulSum);
  m.def("reduce_op_name", &reduceOpName, nb::arg("op"));

  nb::class_<ReduceOpSpec>(m, "ReduceOpSpec",
                           "A reduction: the operator and, for PREMUL_SUM, its scalar (host value or device "
                           "pointer to one element of the collective's dtype)")
      .def(nb::init_implicit<ReduceOp>(), nb::arg("op"))
      .def_static("pre_mul_sum", &ReduceOpSpec::preMulSum, nb::arg("scalar"))
      .def_static(
          "pre_mul_sum_device", [](uintptr_t p) { return ReduceOpSpec::preMulSumDevice(asPointer(p)); },
          nb::arg("scalar_ptr"))
      .def_prop_ro("op", [](const ReduceOpSpec& s) { return s.op; })
      .def_prop_ro("host_scalar", [](const ReduceOpSpec& s) { return s.hostScalar; })
      .def_prop_ro("device_scalar",
                   [](const ReduceOpSpec& s) { return reinterpret_cast<uintptr_t>(s.deviceScalar); })
      .def("__repr__", [](const ReduceOpSpec& s) {
        std::string text = std::string("ReduceOpSpec(") + reduceOpName(s.op);
        if (s.op == ReduceOp::PreMulSum) {
          text += s.deviceScalar ? std::string(", device scalar") : detail::concat(", ", s.hostScalar);
        }
        return text + ")";
      });

  auto collective = nb::enum_<Collective>(m, "Collective", "Collective operations (names as collectiveName)");
  for (int i = 0; i < kNumCollectives; ++i) {
    const auto c = static_cast<Collective>(i);
    std::string name = collectiveName(c);
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    collective.value(name.c_str(), c);
  }
  m.def("collective_name", &collectiveName, nb::arg("collective"));

  nb::enum_<ErrorCode>(m, "ErrorCode", "The code of a meshcomm error")
      .value("INVALID_USAGE", ErrorCode::InvalidUsage)
      .value("SYSTEM_ERROR", ErrorCode::SystemError)
      .value("CUDA_ERROR", ErrorCode::CudaError)
      .value("TIMEOUT", ErrorCode::Timeout)
      .value("REMOTE_ERROR", ErrorCode::RemoteError)
      .value("INTERNAL_ERROR", ErrorCode::InternalError);
}

}  // namespace meshcomm::python
