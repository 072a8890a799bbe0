// Backend registration and the dynamic-loader entry (see registration.hpp).
#include "registration.hpp"

#include <comms/torchcomms/TorchCommFactory.hpp>

#include <mutex>

#include "backend.hpp"

namespace meshcomm::torch_backend {

void registerBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::comms::TorchCommFactory::get().register_backend(
        MeshcommTorchComm::kBackendName, [] { return std::make_shared<MeshcommTorchComm>(); });
  });
}

const char* builtTorchcommsVersion() {
  return MESHCOMM_TORCHCOMMS_VERSION;
}

const char* builtBackendAbiVersion() {
  return torch::comms::TORCHCOMM_BACKEND_ABI_VERSION;
}

}  // namespace meshcomm::torch_backend

namespace {

torch::comms::TorchCommBackend* newComm() {
  return new meshcomm::torch_backend::MeshcommTorchComm();
}

void destroyComm(torch::comms::TorchCommBackend* comm) {
  delete comm;
}

const char* supportedVersion() {
  return torch::comms::TORCHCOMM_BACKEND_ABI_VERSION;
}

}  // namespace

extern "C" torch::comms::DynamicLoaderInterface create_dynamic_loader_meshcomm() {
  torch::comms::DynamicLoaderInterface loader{};
  loader.new_comm = newComm;
  loader.destroy_comm = destroyComm;
  loader.get_supported_version = supportedVersion;
  return loader;
}
