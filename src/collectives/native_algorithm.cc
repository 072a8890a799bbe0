// Loading native algorithms (include/meshcomm/native_algorithm.hpp, docs/native.md): dlopen with
// RTLD_NODELETE (a library is never unloaded, so kernels, contexts and deleters it defines outlive any
// owner), the three entry points of MESHCOMM_EXPORT_NATIVE_ALGORITHM, and the forwarding wrapper.
#include "meshcomm/native_algorithm.hpp"

#include <dlfcn.h>

#include <utility>

#include "meshcomm/errors.hpp"

namespace meshcomm {

class NativeAlgorithmLibrary {
 public:
  using Create = Algorithm* (*)();
  using Destroy = void (*)(Algorithm*);

  explicit NativeAlgorithmLibrary(std::string path) : path_(std::move(path)) {
    // RTLD_LOCAL: two native libraries may define the same class names. Their references to libmeshcomm
    // resolve to the copy this process already has (same SONAME), never to a second one.
    void* handle = dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    MESHCOMM_REQUIRE(handle != nullptr, "native algorithm: cannot load '", path_, "': ", lastDlError());
    handle_ = handle;
    using AbiVersion = int (*)();
    auto abi = reinterpret_cast<AbiVersion>(symbol("meshcomm_native_abi_version"));
    create_ = reinterpret_cast<Create>(symbol("meshcomm_native_create"));
    destroy_ = reinterpret_cast<Destroy>(symbol("meshcomm_native_destroy"));
    const int version = abi();
    MESHCOMM_REQUIRE(version == MESHCOMM_NATIVE_ABI_VERSION, "native algorithm: '", path_,
                     "' was built against meshcomm native ABI ", version, ", this libmeshcomm has ",
                     MESHCOMM_NATIVE_ABI_VERSION, ": rebuild it against the installed headers");
  }
  // No dlclose: the library was opened RTLD_NODELETE (and closing it would unregister its kernels).

  const std::string& path() const { return path_; }
  Algorithm* create() const {
    Algorithm* a = create_();
    MESHCOMM_REQUIRE(a != nullptr, "native algorithm: '", path_, "': meshcomm_native_create returned null");
    return a;
  }
  void destroy(Algorithm* a) const { destroy_(a); }

 private:
  static std::string lastDlError() {
    const char* e = dlerror();
    return e != nullptr ? e : "unknown dlerror";
  }
  void* symbol(const char* name) {
    dlerror();
    void* s = dlsym(handle_, name);
    MESHCOMM_REQUIRE(s != nullptr, "native algorithm: '", path_, "' does not export ", name,
                     " (end the file with MESHCOMM_EXPORT_NATIVE_ALGORITHM(YourAlgorithm), "
                     "from meshcomm/native_algorithm.hpp): ",
                     lastDlError());
    return s;
  }

  std::string path_;
  void* handle_ = nullptr;
  Create create_ = nullptr;
  Destroy destroy_ = nullptr;
};

std::shared_ptr<NativeAlgorithm> NativeAlgorithm::load(const std::string& path, const std::string& name) {
  MESHCOMM_REQUIRE(!name.empty(), "native algorithm: '", path, "': the name must not be empty");
  auto library = std::make_shared<const NativeAlgorithmLibrary>(path);
  return std::make_shared<NativeAlgorithm>(std::move(library), name);
}

NativeAlgorithm::NativeAlgorithm(std::shared_ptr<const NativeAlgorithmLibrary> library, std::string name)
    : library_(std::move(library)), name_(std::move(name)), impl_(library_->create()) {}

NativeAlgorithm::~NativeAlgorithm() {
  library_->destroy(impl_);
}

std::shared_ptr<NativeAlgorithm> NativeAlgorithm::freshInstance() const {
  return std::make_shared<NativeAlgorithm>(library_, name_);
}

const std::string& NativeAlgorithm::libraryPath() const {
  return library_->path();
}

Collective NativeAlgorithm::collective() const {
  return impl_->collective();
}

void NativeAlgorithm::initialize(CommResources& resources) {
  impl_->initialize(resources);
}

std::string NativeAlgorithm::unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const {
  return impl_->unsupportedReason(args, topo);
}

LaunchConfig NativeAlgorithm::defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const {
  return impl_->defaultConfig(args, topo);
}

std::string NativeAlgorithm::contextKey(const CollectiveArgs& args) const {
  return impl_->contextKey(args);
}

std::shared_ptr<void> NativeAlgorithm::buildContext(CommResources& resources, const CollectiveArgs& args) {
  return impl_->buildContext(resources, args);
}

void NativeAlgorithm::launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
                             void* context) {
  impl_->launch(resources, args, config, context);
}

}  // namespace meshcomm
