#!/usr/bin/env bash
# Configures and builds meshcomm into ${BUILD_DIR:-build} with all cores. Extra arguments go to cmake.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
# Shared libraries must use the shared libstdc++ (the one torch loads); some images point CXX at a
# wrapper that links only the static one. Prefer the system compiler where it exists.
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi
extra=()
if [ -d "$repo/.deps/googletest" ] && [ ! -f /usr/include/gtest/gtest.h ]; then
  extra+=(-DMESHCOMM_GTEST_SOURCE_DIR="$repo/.deps/googletest")
fi
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" "$@" >/dev/null
ninja -C "$build"
