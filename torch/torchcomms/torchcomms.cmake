# The torchcomms backend "meshcomm" (docs/torchcomms.md), included by torch/CMakeLists.txt once torch is found:
# - libmeshcomm_torchcomms.so: the backend (torch::comms::TorchCommBackend), linked to the one shared
#   libmeshcomm, to torch's libraries and to the installed torchcomms' libtorchcomms.so (no second copy of
#   its factory); it exports create_dynamic_loader_meshcomm for C++ users;
# - meshcomm._torchcomms_backend: the Python extension whose import registers the backend;
# - in the build tree, a meshcomm dist-info with the torchcomms.backends entry point (the wheel's comes from
#   pyproject.toml), so that torchcomms.new_comm("meshcomm") finds it on PYTHONPATH=<build>/python.
#
# torchcomms is located like torch (importlib, without importing it): MESHCOMM_TORCHCOMMS_DIR overrides the
# package directory. Its wheels ship no C++ headers: MESHCOMM_TORCHCOMMS_INCLUDE_DIR names a directory holding
# comms/torchcomms/TorchCommBackend.hpp of the same torchcomms version (a checkout of its release; its
# version.txt, when present, must match the installed version). MESHCOMM_BUILD_TORCHCOMMS: AUTO builds it
# when all is found (else says why and skips), ON makes a missing piece an error, OFF skips it.
set(MESHCOMM_TORCHCOMMS_DIR "" CACHE PATH "installed torchcomms package directory; empty: ask Python")
set(MESHCOMM_TORCHCOMMS_INCLUDE_DIR "" CACHE PATH
  "directory holding comms/torchcomms/TorchCommBackend.hpp for the installed torchcomms version")

function(meshcomm_skip_torchcomms why)
  if(MESHCOMM_BUILD_TORCHCOMMS STREQUAL "ON")
    message(FATAL_ERROR "MESHCOMM_BUILD_TORCHCOMMS=ON: ${why}")
  endif()
  message(STATUS "meshcomm: skipping the torchcomms backend: ${why} (MESHCOMM_BUILD_TORCHCOMMS=AUTO; "
    "docs/torchcomms.md says how to build it)")
endfunction()

if(MESHCOMM_BUILD_TORCHCOMMS STREQUAL "OFF")
  return()
endif()

set(_tc_dir "${MESHCOMM_TORCHCOMMS_DIR}")
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import importlib.util as u, importlib.metadata as m, os; s = u.find_spec('torchcomms'); \
print(os.path.dirname(s.origin) if s and s.origin else ''); print(m.version('torchcomms') if s else '')"
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
  OUTPUT_VARIABLE _tc_query OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
string(REPLACE "\n" ";" _tc_query "${_tc_query}")
list(LENGTH _tc_query _tc_query_len)
if(_tc_query_len GREATER 0)
  list(GET _tc_query 0 _tc_found_dir)
endif()
if(_tc_query_len GREATER 1)
  list(GET _tc_query 1 _tc_version)
endif()
if(NOT _tc_dir)
  set(_tc_dir "${_tc_found_dir}")
endif()
if(NOT _tc_dir)
  meshcomm_skip_torchcomms("no torchcomms package for ${Python_EXECUTABLE}")
  return()
endif()
if(NOT EXISTS "${_tc_dir}/libtorchcomms.so")
  meshcomm_skip_torchcomms("${_tc_dir} has no libtorchcomms.so")
  return()
endif()
if(NOT _tc_version)
  meshcomm_skip_torchcomms("the version of the torchcomms at ${_tc_dir} is unknown (no package metadata)")
  return()
endif()

set(_tc_include "${MESHCOMM_TORCHCOMMS_INCLUDE_DIR}")
if(NOT _tc_include AND EXISTS "${_tc_dir}/include/comms/torchcomms/TorchCommBackend.hpp")
  set(_tc_include "${_tc_dir}/include")
endif()
if(NOT _tc_include OR NOT EXISTS "${_tc_include}/comms/torchcomms/TorchCommBackend.hpp")
  meshcomm_skip_torchcomms("torchcomms ${_tc_version} is installed at ${_tc_dir}, but no C++ headers were found "
    "(its wheel ships none): set MESHCOMM_TORCHCOMMS_INCLUDE_DIR to a checkout of torchcomms ${_tc_version}")
  return()
endif()
file(STRINGS "${_tc_include}/comms/torchcomms/TorchCommBackend.hpp" _tc_abi_line
  REGEX "TORCHCOMM_BACKEND_ABI_VERSION *=")
string(REGEX REPLACE ".*= *\"([^\"]*)\".*" "\\1" _tc_abi "${_tc_abi_line}")
# The installed version without a local or dev suffix ("0.2.0+cu130" -> "0.2.0").
string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" _tc_release "${_tc_version}")
if(EXISTS "${_tc_include}/version.txt")
  file(STRINGS "${_tc_include}/version.txt" _tc_header_version LIMIT_COUNT 1)
  string(STRIP "${_tc_header_version}" _tc_header_version)
  if(NOT _tc_header_version STREQUAL _tc_release)
    meshcomm_skip_torchcomms("the headers at ${_tc_include} are torchcomms ${_tc_header_version} but torchcomms "
      "${_tc_version} is installed: the backend must be built against the installed version's headers")
    return()
  endif()
endif()
message(STATUS "meshcomm: building the torchcomms backend against torchcomms ${_tc_version} (backend ABI "
  "${_tc_abi}) at ${_tc_dir}, headers ${_tc_include}")

file(GLOB _tc_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/torchcomms/*.cc)
list(REMOVE_ITEM _tc_sources ${CMAKE_CURRENT_SOURCE_DIR}/torchcomms/module.cc)
add_library(meshcomm_torchcomms SHARED ${_tc_sources})
target_include_directories(meshcomm_torchcomms SYSTEM PRIVATE "${_tc_include}")
target_include_directories(meshcomm_torchcomms PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/torchcomms)
target_link_directories(meshcomm_torchcomms PRIVATE "${_tc_dir}")
list(FILTER _torch_lib_paths EXCLUDE REGEX "torch_python")
target_link_libraries(meshcomm_torchcomms PRIVATE meshcomm_torch_common ${_torch_lib_paths} -ltorchcomms)
target_compile_features(meshcomm_torchcomms PRIVATE cxx_std_20)  # torchcomms' headers are C++20
target_compile_definitions(meshcomm_torchcomms PRIVATE MESHCOMM_VERSION="${PROJECT_VERSION}"
  MESHCOMM_TORCHCOMMS_VERSION="${_tc_version}")
meshcomm_torch_face(meshcomm_torchcomms BUILD_RPATH "${_tc_dir}" INSTALL_RPATH "$ORIGIN/../torchcomms")

Python_add_library(_torchcomms_backend MODULE WITH_SOABI ${CMAKE_CURRENT_SOURCE_DIR}/torchcomms/module.cc)
target_include_directories(_torchcomms_backend SYSTEM PRIVATE "${_tc_include}" "${_torch_dir}/include")
target_include_directories(_torchcomms_backend PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/torchcomms
  ${CMAKE_CURRENT_SOURCE_DIR}/common)
target_link_libraries(_torchcomms_backend PRIVATE meshcomm_torchcomms)
target_compile_features(_torchcomms_backend PRIVATE cxx_std_20)
target_compile_definitions(_torchcomms_backend PRIVATE _GLIBCXX_USE_CXX11_ABI=1)
meshcomm_torch_face(_torchcomms_backend BUILD_RPATH "${_tc_dir}" INSTALL_RPATH "$ORIGIN/../torchcomms")
add_dependencies(meshcomm_python _torchcomms_backend)
install(TARGETS meshcomm_torchcomms _torchcomms_backend LIBRARY DESTINATION meshcomm COMPONENT python)

# What the build saw, checked by meshcomm.torchcomms before it loads the extension (ABI mismatch).
file(WRITE ${_package_dir}/torchcomms/_build.py
  "# Written by CMake (torch/torchcomms/torchcomms.cmake): the torchcomms this build was made against.\n"
  "TORCHCOMMS_VERSION = \"${_tc_version}\"\nBACKEND_ABI_VERSION = \"${_tc_abi}\"\n")
install(FILES ${_package_dir}/torchcomms/_build.py DESTINATION meshcomm/torchcomms COMPONENT python)

# The build tree's dist-info: torchcomms.new_comm finds backends through the torchcomms.backends entry point.
set(_dist_info ${CMAKE_BINARY_DIR}/python/meshcomm-${PROJECT_VERSION}.dist-info)
file(WRITE ${_dist_info}/METADATA "Metadata-Version: 2.1\nName: meshcomm\nVersion: ${PROJECT_VERSION}\n")
file(WRITE ${_dist_info}/entry_points.txt "[torchcomms.backends]\nmeshcomm = meshcomm.torchcomms\n")
