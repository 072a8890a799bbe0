#!/usr/bin/env bash
# The main job: builds meshcomm and runs meshcomm-bench (every collective, nccl-tests columns) on all local
# GPUs, next to NCCL when libnccl.so.2 can be loaded (else meshcomm alone). Extra arguments go to
# meshcomm-bench (e.g. -d float -e 256M --json results.json); see meshcomm-bench --help.
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
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# NCCL for --compare: MESHCOMM_BENCH_NCCL_LIB, the loader's search path, or a pip wheel (nvidia-nccl-cu*).
compare=()
lib=${MESHCOMM_BENCH_NCCL_LIB:-libnccl.so.2}
if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$lib" 2>/dev/null ||
  { [ -z "${MESHCOMM_BENCH_NCCL_LIB:-}" ] && ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; }; then
  compare=(--compare nccl)
else
  wheel=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null || true)
  if [ -n "$wheel" ] && [ -f "$wheel" ]; then
    export MESHCOMM_BENCH_NCCL_LIB=$wheel
    compare=(--compare nccl)
  else
    echo "meshcomm bench: libnccl.so.2 not found (set MESHCOMM_BENCH_NCCL_LIB to compare with NCCL); meshcomm only"
  fi
fi
exec "$build/tools/meshcomm-run" -n "$ngpu" -- "$build/tools/meshcomm-bench" -o all -d bfloat16 -b 1K -e 1G -f 4 \
  --graph-max 16M -c 1 --host-cost 500 "${compare[@]}" "$@"
