#include "nccl_loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace meshcomm::tools {

std::string ncclLibraryPath() {
  const char* p = std::getenv("MESHCOMM_BENCH_NCCL_LIB");
  return (p != nullptr && *p != '\0') ? std::string(p) : std::string("libnccl.so.2");
}

namespace {
template <typename F>
void resolve(void* lib, const char* name, F& fn, bool required, const std::string& path) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr && required)
    throw std::runtime_error("--compare nccl: " + path + " has no symbol " + name +
                             " (not an NCCL 2.x library?)");
  fn = reinterpret_cast<F>(sym);
}
}  // namespace

NcclApi NcclApi::load() {
  NcclApi api;
  api.path = ncclLibraryPath();
  // RTLD_LOCAL: NCCL's symbols stay out of the global namespace (no clash with a meshcomm NCCL shim).
  void* lib = dlopen(api.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    throw std::runtime_error("--compare nccl needs libnccl.so.2: cannot load '" + api.path + "' (" +
                             (err ? err : "unknown error") +
                             "); install NCCL (e.g. apt install libnccl2, or pip install nvidia-nccl-cu12) "
                             "or point MESHCOMM_BENCH_NCCL_LIB at the library");
  }
  // The handle is never closed: NCCL keeps threads and state for the life of the process.
  resolve(lib, "ncclGetVersion", api.getVersion, true, api.path);
  resolve(lib, "ncclGetUniqueId", api.getUniqueId, true, api.path);
  resolve(lib, "ncclCommInitRank", api.commInitRank, true, api.path);
  resolve(lib, "ncclCommDestroy", api.commDestroy, true, api.path);
  resolve(lib, "ncclGetErrorString", api.getErrorString, true, api.path);
  resolve(lib, "ncclAllReduce", api.allReduce, true, api.path);
  resolve(lib, "ncclAllGather", api.allGather, true, api.path);
  resolve(lib, "ncclReduceScatter", api.reduceScatter, true, api.path);
  resolve(lib, "ncclBroadcast", api.broadcast, true, api.path);
  resolve(lib, "ncclReduce", api.reduce, true, api.path);
  resolve(lib, "ncclSend", api.send, true, api.path);
  resolve(lib, "ncclRecv", api.recv, true, api.path);
  resolve(lib, "ncclGroupStart", api.groupStart, true, api.path);
  resolve(lib, "ncclGroupEnd", api.groupEnd, true, api.path);
  resolve(lib, "ncclRedOpCreatePreMulSum", api.redOpCreatePreMulSum, false, api.path);
  resolve(lib, "ncclRedOpDestroy", api.redOpDestroy, false, api.path);
  api.check(api.getVersion(&api.version), "GetVersion");
  return api;
}

void NcclApi::check(nccl::Result r, const char* what) const {
  if (r == 0) return;
  const char* s = getErrorString != nullptr ? getErrorString(r) : "unknown";
  throw std::runtime_error(std::string("nccl") + what + " failed: " + (s ? s : "unknown") + " (" +
                           std::to_string(r) + ")");
}

std::string NcclApi::versionString() const {
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older 2.x: major*1000 + minor*100 + patch.
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? (version / 100) % 100 : (version / 100) % 10;
  const int patch = version % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace meshcomm::tools
