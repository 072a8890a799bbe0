// How torchcomms finds the meshcomm backend. The backend lives in libmeshcomm_torchcomms.so (no Python):
// - Python: the entry point torchcomms.backends:meshcomm names the module meshcomm.torchcomms, whose import
//   loads the extension meshcomm._torchcomms_backend, which calls registerBackend() (TorchCommFactory's
//   static registration, the only route torchcomms.new_comm takes);
// - C++: TORCHCOMMS_BACKEND_LIB_PATH_MESHCOMM=<path>/libmeshcomm_torchcomms.so, and torchcomms' factory
//   dlopens it and calls create_dynamic_loader_meshcomm(), which reports the backend ABI this library was
//   built for (torchcomms refuses a mismatch).
#pragma once

#include <comms/torchcomms/TorchCommBackend.hpp>

#define MESHCOMM_TORCHCOMMS_API __attribute__((visibility("default")))

namespace meshcomm::torch_backend {

// Registers "meshcomm" with torch::comms::TorchCommFactory (idempotent).
MESHCOMM_TORCHCOMMS_API void registerBackend();

// The torchcomms version and backend ABI of the headers this library was built against.
MESHCOMM_TORCHCOMMS_API const char* builtTorchcommsVersion();
MESHCOMM_TORCHCOMMS_API const char* builtBackendAbiVersion();

}  // namespace meshcomm::torch_backend

extern "C" MESHCOMM_TORCHCOMMS_API torch::comms::DynamicLoaderInterface create_dynamic_loader_meshcomm();
