// GpuBuffer: owning device memory for Python users without torch (and the GPU tests), with blocking copies
// from and to bytes and DLPack export (zero-copy views for torch, CuPy, JAX: docs/python.md);
// cuda_device_count().
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <optional>
#include <string>

#include "bindings.hpp"
#include "meshcomm/errors.hpp"
#include "meshcomm/gpu_utils.hpp"

namespace meshcomm::python {

namespace {

class PyGpuBuffer {
 public:
  PyGpuBuffer(size_t nbytes, int device, GpuMemoryKind kind) {
    if (device < 0) MESHCOMM_CUDA_CHECK(cudaGetDevice(&device));
    CudaDeviceGuard guard(device);
    buffer_ = GpuBuffer(nbytes, kind);
    device_ = device;
  }

  uintptr_t ptr() const { return reinterpret_cast<uintptr_t>(buffer_.data()); }
  size_t nbytes() const { return buffer_.size(); }
  int device() const { return device_; }
  GpuMemoryKind kind() const { return buffer_.kind(); }

  // Synchronous copies (cudaMemcpy: ordered after work on the legacy default stream). An upload also waits
  // for its DMA (cudaMemcpy from pageable memory returns once the data is staged), so that work on any
  // stream afterwards reads the new bytes. A download first waits for the legacy stream with
  // cudaStreamSynchronize: a pageable cudaMemcpy that waits for a kernel can hold off other threads' CUDA
  // calls, such as those of a proxy thread serving that kernel's port channels.
  void upload(const char* data, size_t bytes, size_t offset) {
    requireRange("upload", bytes, offset);
    CudaDeviceGuard guard(device_);
    if (bytes == 0) return;
    MESHCOMM_CUDA_CHECK(cudaMemcpy(at(offset), data, bytes, cudaMemcpyHostToDevice));
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  std::string download(size_t bytes, size_t offset) {
    requireRange("download", bytes, offset);
    std::string out(bytes, '\0');
    CudaDeviceGuard guard(device_);
    if (bytes == 0) return out;
    MESHCOMM_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    MESHCOMM_CUDA_CHECK(cudaMemcpy(out.data(), at(offset), bytes, cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  void requireRange(const char* op, size_t bytes, size_t offset) const {
    MESHCOMM_REQUIRE(offset <= nbytes() && bytes <= nbytes() - offset, "GpuBuffer.", op, ": ", bytes,
                     " bytes at offset ", offset, " do not fit in the buffer of ", nbytes(), " bytes");
  }
  char* at(size_t offset) const { return static_cast<char*>(buffer_.data()) + offset; }

  GpuBuffer buffer_;
  int device_ = -1;
};

// The buffer's bytes as a DLPack producer (a 1-D uint8 nanobind.nb_ndarray, array-API object on the buffer's
// GPU) that keeps the GpuBuffer alive: consumers (torch.from_dlpack, cupy.from_dlpack) see the same memory,
// no copy.
nb::object bytesView(nb::handle self) {
  const PyGpuBuffer& b = nb::cast<const PyGpuBuffer&>(self);
  const size_t shape[1] = {b.nbytes()};
  nb::ndarray<nb::array_api, nb::device::cuda> view(reinterpret_cast<void*>(b.ptr()), 1, shape, self, nullptr,
                                                    nb::dtype<uint8_t>(), nb::device::cuda::value,
                                                    b.device());
  return nb::cast(view);
}

}  // namespace

void bindGpuBuffer(nb::module_& m) {
  m.def("cuda_device_count", &gpuCount, "CUDA devices visible to this process (0 without a driver or GPU)");

  nb::enum_<GpuMemoryKind>(m, "GpuMemoryKind")
      .value("CUDA_MALLOC", GpuMemoryKind::CudaMalloc)
      .value("CU_MEM", GpuMemoryKind::CuMem);

  nb::class_<PyGpuBuffer>(m, "GpuBuffer", "Owning, zero-initialised device memory (freed with the object)")
      .def(nb::init<size_t, int, GpuMemoryKind>(), nb::arg("nbytes"), nb::arg("device") = -1,
           nb::arg("kind") = GpuMemoryKind::CudaMalloc, nb::call_guard<nb::gil_scoped_release>(),
           "device -1: the current device")
      .def_prop_ro("ptr", &PyGpuBuffer::ptr)
      .def_prop_ro("nbytes", &PyGpuBuffer::nbytes)
      .def_prop_ro("device", &PyGpuBuffer::device)
      .def_prop_ro("kind", &PyGpuBuffer::kind)
      .def(
          "upload",
          [](PyGpuBuffer& b, const nb::bytes& data, size_t offset) {
            std::string copy(data.c_str(), data.size());
            nb::gil_scoped_release release;
            b.upload(copy.data(), copy.size(), offset);
          },
          nb::arg("data"), nb::arg("offset") = 0, "Copies bytes to the buffer at `offset` (blocking)")
      .def(
          "download",
          [](PyGpuBuffer& b, std::optional<size_t> nbytes, size_t offset) {
            std::string out;
            {
              nb::gil_scoped_release release;
              const size_t n = nbytes ? *nbytes : (offset <= b.nbytes() ? b.nbytes() - offset : 0);
              out = b.download(n, offset);
            }
            return nb::bytes(out.data(), out.size());
          },
          nb::arg("nbytes") = nb::none(), nb::arg("offset") = 0,
          "The bytes from `offset` (all the rest when nbytes is None), after a blocking copy")
      // DLPack: every GpuBuffer operation is synchronous, so there is no pending work for the consumer's
      // stream to wait on; `stream` and the other keywords of the protocol pass through to the view.
      .def("as_dlpack", &bytesView,
           "The bytes as a DLPack-capable 1-D uint8 array (zero-copy; keeps the buffer)")
      .def("__dlpack__",
           [](nb::handle self, nb::kwargs kwargs) { return bytesView(self).attr("__dlpack__")(**kwargs); })
      .def("__dlpack_device__", [](nb::handle self) { return bytesView(self).attr("__dlpack_device__")(); });
}

}  // namespace meshcomm::python
