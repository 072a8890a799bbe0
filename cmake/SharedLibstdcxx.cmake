# Every shared object of meshcomm (libmeshcomm, the NCCL shim, the Python and torch extensions) must link the
# shared libstdc++ (the one torch loads): a private static copy per library splits the C++ runtime, and a
# C++ exception or stream used across two copies then crashes the process. Some images point CXX or
# CUDAHOSTCXX at a compiler that finds only the static libstdc++; the CUDA host compiler matters as much as
# the C++ one, because CMake links every target with CUDA code against the library directories nvcc's host
# compiler reports (its static libstdc++.a then wins over the shared one).
#
# meshcomm_prefer_shared_libstdcxx_compiler(): before project(). When the compiler CMake would use ($CXX) or
# nvcc's host compiler ($CUDAHOSTCXX, else the g++ on PATH) finds no shared libstdc++ and nothing was chosen
# with -DCMAKE_CXX_COMPILER / -DCMAKE_CUDA_HOST_COMPILER, use /usr/bin/g++ (as scripts/build.sh does), so
# `pip install .` works there too.
# meshcomm_require_shared_libstdcxx(): after project(). Links a test program from a C++ and a CUDA source (as
# libmeshcomm is linked) and fails the configure step, naming both compilers, when it does not load
# libstdc++.so.
function(_meshcomm_finds_shared_libstdcxx compiler out)
  execute_process(COMMAND "${compiler}" -print-file-name=libstdc++.so
    OUTPUT_VARIABLE path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND IS_ABSOLUTE "${path}" AND EXISTS "${path}")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

macro(meshcomm_prefer_shared_libstdcxx_compiler)
  if(NOT CMAKE_CXX_COMPILER AND DEFINED ENV{CXX} AND EXISTS /usr/bin/g++)
    find_program(_meshcomm_env_cxx NAMES "$ENV{CXX}" NO_CACHE)
    if(_meshcomm_env_cxx)
      _meshcomm_finds_shared_libstdcxx("${_meshcomm_env_cxx}" _meshcomm_env_cxx_shared)
      if(NOT _meshcomm_env_cxx_shared)
        message(WARNING "CXX=$ENV{CXX} finds no shared libstdc++: using /usr/bin/g++ instead (every shared "
          "object must link the shared libstdc++; pass -DCMAKE_CXX_COMPILER to choose another)")
        set(CMAKE_CXX_COMPILER /usr/bin/g++)
      endif()
    endif()
  endif()
  if(NOT CMAKE_CUDA_HOST_COMPILER AND EXISTS /usr/bin/g++)
    if(DEFINED ENV{CUDAHOSTCXX})
      find_program(_meshcomm_cuda_host NAMES "$ENV{CUDAHOSTCXX}" NO_CACHE)
    else()
      find_program(_meshcomm_cuda_host NAMES g++ NO_CACHE)  # nvcc's default host compiler
    endif()
    if(_meshcomm_cuda_host)
      _meshcomm_finds_shared_libstdcxx("${_meshcomm_cuda_host}" _meshcomm_cuda_host_shared)
      if(NOT _meshcomm_cuda_host_shared)
        message(WARNING "nvcc's host compiler ${_meshcomm_cuda_host} finds no shared libstdc++: using "
          "/usr/bin/g++ instead (pass -DCMAKE_CUDA_HOST_COMPILER to choose another)")
        set(ENV{CUDAHOSTCXX} /usr/bin/g++)  # CMake's CUDA detection reads the variable from here
        set(CMAKE_CUDA_HOST_COMPILER /usr/bin/g++)
      endif()
    endif()
  endif()
endmacro()

function(meshcomm_require_shared_libstdcxx)
  if(NOT CMAKE_READELF OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
    return()
  endif()
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/meshcomm_libstdcxx_check)
  file(WRITE ${dir}/check.cc "#include <string>\nint device_side();\n"
    "int main(int argc, char**) { return std::to_string(argc).size() == 0 ? device_side() : 0; }\n")
  file(WRITE ${dir}/device_side.cu "__global__ void kernel() {}\nint device_side() { kernel<<<1, 1>>>(); return 0; }\n")
  try_compile(ok ${dir}/build SOURCES ${dir}/check.cc ${dir}/device_side.cu COPY_FILE ${dir}/check
    OUTPUT_VARIABLE log)
  set(compilers "C++ compiler ${CMAKE_CXX_COMPILER}, CUDA host compiler ${CMAKE_CUDA_HOST_COMPILER}")
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    set(compilers "C++ compiler ${CMAKE_CXX_COMPILER}, CUDA host compiler: nvcc's default")
  endif()
  if(NOT ok)
    message(FATAL_ERROR "The ${compilers} cannot link a test program:\n${log}")
  endif()
  execute_process(COMMAND ${CMAKE_READELF} -d ${dir}/check OUTPUT_VARIABLE dynamic ERROR_QUIET)
  if(NOT dynamic MATCHES "libstdc\\+\\+\\.so")
    message(FATAL_ERROR "The ${compilers} link libstdc++ statically: every meshcomm shared library would "
      "carry its own C++ runtime (exceptions and streams crossing them crash). Use compilers that link the "
      "shared libstdc++, e.g. CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++.")
  endif()
endfunction()
