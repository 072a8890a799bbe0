# Every shared object of meshcomm (libmeshcomm, the NCCL shim, the Python and torch extensions) must link the
# shared libstdc++ (the one torch loads): a private static copy per library splits the C++ runtime, and a
# C++ exception thrown in one library and caught in another then crashes the process. Some images point CXX
# at a compiler that finds only the static libstdc++.
#
# meshcomm_prefer_shared_libstdcxx_compiler(): before project(). When the compiler CMake would use ($CXX)
# finds no shared libstdc++ and nothing was chosen with -DCMAKE_CXX_COMPILER, use /usr/bin/g++ (as
# scripts/build.sh does), so `pip install .` works there too.
# meshcomm_require_shared_libstdcxx(): after project(). Links a test program and fails the configure step,
# naming the compiler, when it does not load libstdc++.so.
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
        if(NOT CMAKE_CUDA_HOST_COMPILER)
          set(CMAKE_CUDA_HOST_COMPILER /usr/bin/g++)
        endif()
      endif()
    endif()
  endif()
endmacro()

function(meshcomm_require_shared_libstdcxx)
  if(NOT CMAKE_READELF OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
    return()
  endif()
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/meshcomm_libstdcxx_check)
  file(WRITE ${dir}/check.cc "#include <string>\nint main(int argc, char**) { return std::to_string(argc).size() == 0; }\n")
  try_compile(ok ${dir}/build SOURCES ${dir}/check.cc COPY_FILE ${dir}/check OUTPUT_VARIABLE log)
  if(NOT ok)
    message(FATAL_ERROR "The C++ compiler ${CMAKE_CXX_COMPILER} cannot link a test program:\n${log}")
  endif()
  execute_process(COMMAND ${CMAKE_READELF} -d ${dir}/check OUTPUT_VARIABLE dynamic ERROR_QUIET)
  if(NOT dynamic MATCHES "libstdc\\+\\+\\.so")
    message(FATAL_ERROR "The C++ compiler ${CMAKE_CXX_COMPILER} links libstdc++ statically: every meshcomm "
      "shared library would carry its own C++ runtime (exceptions crossing them crash). Use a compiler that "
      "links the shared libstdc++, e.g. CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++.")
  endif()
endfunction()
