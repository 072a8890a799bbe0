// NoGilHolder: the pybind11 holder of the meshcomm c10d types. It owns a c10::intrusive_ptr and drops its
// reference with the GIL released: destroying the last reference of a backend tears its Comm down, which is
// collective (a bootstrap barrier) and must not block other Python threads. Its layout is one
// intrusive_ptr, like the holder torch registers for c10d::Backend, so pybind11 can convert between them.
#pragma once

#include <Python.h>
#include <c10/util/intrusive_ptr.h>
#include <pybind11/pybind11.h>

#include <utility>

namespace meshcomm::torch_backend {

template <typename T>
class NoGilHolder {
 public:
  NoGilHolder() = default;
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder(NoGilHolder&&) noexcept = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  NoGilHolder& operator=(NoGilHolder&&) noexcept = default;
  NoGilHolder(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}  // NOLINT: implicit, as pybind11 needs
  // pybind11 constructs a holder from a fresh object it owns (pybind11 GitHub #2957).
  explicit NoGilHolder(T* fresh) : ptr_(c10::intrusive_ptr<T>::unsafe_steal_from_new(fresh)) {}
  ~NoGilHolder() {
    if (!ptr_) return;
    if (PyGILState_Check()) {
      pybind11::gil_scoped_release release;
      ptr_.reset();
    } else {
      ptr_.reset();
    }
  }

  T* get() const noexcept { return ptr_.get(); }
  T& operator*() const noexcept { return *ptr_; }
  T* operator->() const noexcept { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace meshcomm::torch_backend

PYBIND11_DECLARE_HOLDER_TYPE(T, meshcomm::torch_backend::NoGilHolder<T>, true)
