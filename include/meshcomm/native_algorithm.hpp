// Native algorithms: an Algorithm written by a user in a .cu file, built as a shared library outside
// libmeshcomm (meshcomm.compile_native in Python, or any build that links libmeshcomm) and loaded at run
// time (docs/native.md).
//
// The user's file defines a default-constructible class derived from meshcomm::Algorithm and exports it:
//
//   class MyAllReduce : public meshcomm::Algorithm { ... };
//   MESHCOMM_EXPORT_NATIVE_ALGORITHM(MyAllReduce)
//
// Loading checks the library's ABI version; every instance reports the name it was loaded under (the
// class's own name() is not used), so one file can be loaded under several names.
#pragma once

#include <memory>
#include <string>

#include "meshcomm/algorithm.hpp"

// Bumped whenever Algorithm, CollectiveArgs, CommResources or the device views change layout or meaning.
#define MESHCOMM_NATIVE_ABI_VERSION 1

// The three C entry points of a native library (default visibility, so -fvisibility=hidden builds export
// them): the ABI version it was compiled against, a factory and the matching destroyer.
#define MESHCOMM_EXPORT_NATIVE_ALGORITHM(AlgorithmType)                                                      \
  extern "C" __attribute__((visibility("default"))) int meshcomm_native_abi_version() {                      \
    return MESHCOMM_NATIVE_ABI_VERSION;                                                                      \
  }                                                                                                          \
  extern "C" __attribute__((visibility("default"))) ::meshcomm::Algorithm* meshcomm_native_create() {        \
    return new AlgorithmType();                                                                              \
  }                                                                                                          \
  extern "C" __attribute__((visibility("default"))) void meshcomm_native_destroy(::meshcomm::Algorithm* a) { \
    delete a;                                                                                                \
  }

namespace meshcomm {

class NativeAlgorithmLibrary;

// A loaded native algorithm under its registered name: forwards every Algorithm call to the user's
// instance. An instance belongs to at most one Comm (initialize() reserves that Comm's regions); register
// a fresh instance (freshInstance()) on each further Comm.
class NativeAlgorithm final : public Algorithm {
 public:
  // Loads (once per path and process; never unloaded) the shared library at `path` and creates an instance
  // named `name`. Throws InvalidUsage naming the path for a library that cannot be loaded, lacks the entry
  // points of MESHCOMM_EXPORT_NATIVE_ALGORITHM, was built for another ABI version, or for an empty name.
  static std::shared_ptr<NativeAlgorithm> load(const std::string& path, const std::string& name);
  ~NativeAlgorithm() override;

  // A new instance of the same library and name, not initialised.
  std::shared_ptr<NativeAlgorithm> freshInstance() const;
  const std::string& libraryPath() const;

  std::string name() const override { return name_; }
  Collective collective() const override;
  void initialize(CommResources& resources) override;
  std::string unsupportedReason(const CollectiveArgs& args, const CommTopology& topo) const override;
  LaunchConfig defaultConfig(const CollectiveArgs& args, const CommTopology& topo) const override;
  std::string contextKey(const CollectiveArgs& args) const override;
  std::shared_ptr<void> buildContext(CommResources& resources, const CollectiveArgs& args) override;
  void launch(CommResources& resources, const CollectiveArgs& args, const LaunchConfig& config,
              void* context) override;

  NativeAlgorithm(std::shared_ptr<const NativeAlgorithmLibrary> library, std::string name);  // use load()

 private:
  std::shared_ptr<const NativeAlgorithmLibrary> library_;
  std::string name_;
  Algorithm* impl_;  // created and destroyed by the library's own entry points
};

}  // namespace meshcomm
