#!/usr/bin/env bash
# The test command: installs missing build dependencies, builds, checks formatting, runs every test.
# CPU tests always run; GPU tests run on all local GPUs or are reported as skipped with the reason; then the
# fuzz targets replay their corpora and run MESHCOMM_FUZZ_SECONDS (default 60) each (scripts/fuzz.sh).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
"$repo/scripts/install-deps.sh"
"$repo/scripts/check-format.sh"
# The Python extension is built in the same tree (the CUDA code compiles once); pytest imports it below.
"$repo/scripts/build.sh" -DMESHCOMM_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "$ngpu" -lt 2 ]; then
  echo "test.sh: $ngpu NVIDIA GPU(s) visible: the GPU tests (gpu_Nranks) need N GPUs and will show as skipped."
fi
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
# ctest lists skipped tests without their output: print each skip's reason from the test log.
awk '/^\[ RUN      \]/ { test = $4 }
     /: Skipped$/ { getline why; print "ctest skip reason: " test ": " why }
     /SKIPPED: / { sub(/^\[[0-9]+\] /, ""); print "ctest skip reason: " $0 }' "$build/Testing/Temporary/LastTest.log" 2>/dev/null | sort -u || true
# Python tests (docs/python.md) on this build's extension; the GPU ones print why they are skipped.
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -rs "$repo/tests/python"
# Fuzz targets (tests/fuzz) in their own clang tree: corpora replayed, then a bounded run of each.
"$repo/scripts/fuzz.sh" "$build-fuzz"
