// The parts of the meshcomm._meshcomm extension, one per bound concept (docs/python.md). Each binds its
// classes and functions into the module; module.cc calls them in dependency order.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

#include <cuda_runtime.h>

namespace meshcomm::python {

namespace nb = nanobind;

void bindTypes(nb::module_& m);       // DataType, ReduceOp, ReduceOpSpec, Collective, ErrorCode
void bindErrors(nb::module_& m);      // meshcomm.Error and its subclasses, the exception translator
void bindBootstrap(nb::module_& m);   // UniqueId, RankEnv, Bootstrap, TcpBootstrap
void bindGpuBuffer(nb::module_& m);   // GpuBuffer, cuda_device_count
void bindComm(nb::module_& m);        // Comm
void bindAlgorithms(nb::module_& m);  // Algorithm, AlgorithmCollection, build_default_algorithms
void bindNative(nb::module_& m);      // NativeAlgorithm and what compile_native needs (after Algorithm)
void bindPlans(nb::module_& m);       // PlanAlgorithm (after Algorithm)

// Python passes device pointers and streams as integers.
inline void* asPointer(uintptr_t p) {
  return reinterpret_cast<void*>(p);
}
inline cudaStream_t asStream(uintptr_t s) {
  return reinterpret_cast<cudaStream_t>(s);
}

}  // namespace meshcomm::python
