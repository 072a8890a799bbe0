#!/usr/bin/env bash
# The test command: installs missing build dependencies, builds, checks formatting, runs every test.
# CPU tests always run; GPU tests run on all local GPUs or are reported as skipped with the reason.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/scripts/install-deps.sh"
"$repo/scripts/check-format.sh"
"$repo/scripts/build.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "$ngpu" -lt 2 ]; then
  echo "test.sh: $ngpu NVIDIA GPU(s) visible: the GPU tests (gpu_Nranks) need N GPUs and will show as skipped."
fi
ctest --test-dir "${BUILD_DIR:-$repo/build}" --output-on-failure -j "$(nproc)"
