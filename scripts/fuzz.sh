#!/usr/bin/env bash
# The fuzz targets of tests/fuzz (libFuzzer + ASan/UBSan): builds them in a clang tree (only the fuzzers, not
# the library) and runs through ctest every target's regression corpus once and a bounded run of each from it
# (MESHCOMM_FUZZ_SECONDS, default 60). Without clang++ able to link -fsanitize=fuzzer it prints why and
# exits 0, or 1 with MESHCOMM_REQUIRE_FUZZ=1 (.ci/run sets it: CI never passes without fuzzing);
# scripts/test.sh calls it; scripts/install-deps.sh installs clang and its libFuzzer runtime.
#
#   scripts/fuzz.sh [BUILD_DIR]     (default: REPO/build-fuzz)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build-fuzz}
seconds=${MESHCOMM_FUZZ_SECONDS:-60}
trial=$(mktemp -d)
trap 'rm -rf "$trial"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$trial/t.cc"
if ! command -v clang++ >/dev/null || ! clang++ -fsanitize=fuzzer "$trial/t.cc" -o "$trial/t" 2>"$trial/err"; then
  echo "fuzz: SKIPPED: clang++ cannot link -fsanitize=fuzzer ($(command -v clang++ || echo 'clang++ not found');" \
    "Debian: clang and libclang-rt-dev): $(head -c 300 "$trial/err" 2>/dev/null)"
  [ "${MESHCOMM_REQUIRE_FUZZ:-0}" = 1 ] && { echo "fuzz: MESHCOMM_REQUIRE_FUZZ=1: failing"; exit 1; }
  exit 0
fi
mkdir -p "$build"
CXX=clang++ cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHCOMM_BUILD_FUZZERS=ON \
  -DMESHCOMM_BUILD_TESTS=OFF -DMESHCOMM_BUILD_TOOLS=OFF -DMESHCOMM_BUILD_EXAMPLES=OFF -DMESHCOMM_BUILD_PYTHON=OFF \
  -DMESHCOMM_FUZZ_SECONDS="$seconds" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target meshcomm_fuzzers
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -R '^fuzz_'
