#!/usr/bin/env bash
# The main job: builds meshcomm and runs the channel benchmark on the local GPUs (needs 2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "$ngpu" -lt 2 ]; then
  echo "meshcomm bench: needs at least 2 NVIDIA GPUs on this machine, found $ngpu (nvidia-smi -L). Nothing to run."
  exit 0
fi
"$repo/scripts/install-deps.sh"
"$repo/scripts/build.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec "$build/tools/meshcomm-run" -n 2 -- "$build/tools/meshcomm-channel-bench" "$@"
