# Shared by scripts/gpu-check.sh and scripts/torch-check.sh (sourced): the step table of a check run.
#   record STEP RESULT SECONDS NOTE   adds a row to STEPS (a FAIL sets ANY_FAIL=1) and prints it
#   run_step LOG CMD...               runs CMD, output appended to LOG and the console; sets RC and SECS
#   result_of RC                      PASS (0) / SKIP (77) / FAIL
#   print_steps                       the step table (markdown)

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
    if "$py" -c 'import torch' >/dev/null 2>&1; then
      echo "$py"
      return
    fi
  done
}
