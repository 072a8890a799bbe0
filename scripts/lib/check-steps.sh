# Shared by scripts/gpu-check.sh and scripts/torch-check.sh (sourced): the step table of a check run.
#   record STEP RESULT SECONDS NOTE   adds a row to STEPS (a FAIL sets ANY_FAIL=1) and prints it
#   run_step LOG CMD...               runs CMD, output appended to LOG and the console; sets RC and SECS
#   result_of RC                      PASS (0) / SKIP (77) / FAIL
#   print_steps                       the step table (markdown)
#   check_init "$@"                   the usage check (one OUT_DIR argument); sets OUT (absolute) and JOBS;
#                                     prefers /usr/bin/g++ (see gpu-check.sh)
#   torch_gpu_init NAME               PY, NGPUS, NP, TORCHRUN for the torch checks (exit 77 without them)

# NVLink multicast (NVLS) stays off on the shared machines; nothing here uses it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

STEPS=()
ANY_FAIL=0

record() {
  STEPS+=("| $1 | $2 | $3 | $4 |")
  [[ $2 == FAIL ]] && ANY_FAIL=1
  printf '==> %-22s %-4s %5ss  %s\n' "$1" "$2" "$3" "$4"
}

run_step() {
  local log=$1
  shift
  local t
  t=$(date +%s)
  echo "### $(date -Is) \$ $*" >>"$log"
  "$@" 2>&1 | tee -a "$log"
  RC=${PIPESTATUS[0]}
  SECS=$(($(date +%s) - t))
  echo "### exit status $RC after ${SECS}s" >>"$log"
}

result_of() {
  case $1 in
    0) echo PASS ;;
    77) echo SKIP ;;
    *) echo FAIL ;;
  esac
}

print_steps() {
  echo "| step | result | seconds | note |"
  echo "|---|---|---|---|"
  printf '%s\n' "${STEPS[@]}"
}

# find_torch_python: prints a python that imports torch (TORCH_PYTHON, else python3, else the image's torch
# venv); prints nothing when there is none.
find_torch_python() {
  local py
  for py in ${TORCH_PYTHON:-} python3 /opt/torch/.venv/bin/python; do
    # From /: a directory named torch in the working directory (this repo has one) would import as an
    # empty namespace package.
    if (cd / && "$py" -c 'import sys, torch; sys.exit(torch.__file__ is None)') >/dev/null 2>&1; then
      echo "$py"
      return
    fi
  done
}

# torch_gpu_init NAME: sets PY (find_torch_python), NGPUS, NP (NPROC or NGPUS) and TORCHRUN; without a torch
# python or with fewer than 2 GPUs it writes why into OUT/summary.md and exits 77 (skip). Call after check_init.
torch_gpu_init() {
  PY=$(find_torch_python)
  NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  NP=${NPROC:-${NGPUS:-0}}
  if [[ -z $PY ]]; then
    echo "$1: no python with torch (set TORCH_PYTHON)" | tee "$OUT/summary.md"
    exit 77
  fi
  if [[ ${NGPUS:-0} -lt 2 ]]; then
    echo "$1: needs at least 2 GPUs (found ${NGPUS:-0})" | tee "$OUT/summary.md"
    exit 77
  fi
  TORCHRUN=("$PY" -m torch.distributed.run --nproc_per_node "$NP")
}

check_init() {
  if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
  fi
  mkdir -p "$1"
  OUT=$(cd "$1" && pwd)
  JOBS=${JOBS:-$(nproc)}
  # Shared libraries must link the shared libstdc++ (the one torch loads); some images point CXX at a
  # wrapper that finds only the static one. Prefer the system compiler where it exists (as scripts/build.sh).
  if [[ -x /usr/bin/g++ ]]; then export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi
}
