#!/usr/bin/env bash
# Builds meshcomm with its torchcomms backend and runs the torchcomms acceptance checks on the GPUs of this
# machine; logs and a summary go into OUT_DIR (docs/torchcomms.md).
#
#   MESHCOMM_TORCHCOMMS_INCLUDE_DIR=<torchcomms checkout> scripts/torchcomms-check.sh OUT_DIR
#
# Needs: a python with torch and torchcomms installed (torchcomms with its NCCL and gloo backends), and the
# C++ headers of that torchcomms release (its wheels ship none): a checkout of its source, whose
# comms/torchcomms/tests/integration/py also holds torchcomms' own conformance tests.
# Steps: build (libmeshcomm, the Python extensions, libmeshcomm_torchcomms, the GPU tests; Release, all
# cores) -> linkage (shared libstdc++, one libmeshcomm, the installed libtorchcomms) -> window (the GPU test
# Windows.* on every GPU) -> ours (tests/python/torchcomms under torchrun: every op against torchcomms' NCCL
# backend and a host reference, split, graphs, windows, timeouts, c10d routing) -> c10d (tests/python/torch,
# the cuda:meshcomm c10d backend, mixed NCCL groups included) -> conformance (each of torchcomms' integration
# test files with TEST_BACKEND=meshcomm; per-file pass/skip/fail counts in conformance.md) -> bench
# (bench/torch/torchcomms_bench.py: the four ops vs NCCL, eager and graph, host cost). A failed step is
# recorded and the script goes on; exit 1 at the end if any failed.
# Environment: TORCH_PYTHON (default: the first python that imports torch), MESHCOMM_TORCHCOMMS_INCLUDE_DIR
# (required), BUILD_DIR (default REPO/build-torchcomms), PREBUILT=1 (use BUILD_DIR as it is), JOBS, NPROC
# (ranks; default: all GPUs), TORCHCOMMS_CHECKS (a subset of "window ours c10d conformance megatron bench"),
# CONFORMANCE_FILES (test file names, default: every *Test.py), CONFORMANCE_TIMEOUT (seconds, default 1500),
# BENCH_ARGS (extra torchcomms_bench.py args). torchcomms' tests need its dev extras (pydot, parameterized).
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/lib/check-steps.sh"  # record, run_step, result_of, print_steps, check_init; NVLS off
check_init "$@"
BUILD=${BUILD_DIR:-$REPO/build-torchcomms}
T0=$(date +%s)

torch_gpu_init torchcomms-check  # PY, NGPUS, NP, TORCHRUN
TC_SRC=${MESHCOMM_TORCHCOMMS_INCLUDE_DIR:-}
if ! (cd / && "$PY" -c 'import torchcomms') >/dev/null 2>&1; then
  echo "torchcomms-check: $PY cannot import torchcomms (install it first)" | tee "$OUT/summary.md"
  exit 77
fi
if [[ -z $TC_SRC || ! -f $TC_SRC/comms/torchcomms/TorchCommBackend.hpp ]]; then
  echo "torchcomms-check: set MESHCOMM_TORCHCOMMS_INCLUDE_DIR to a checkout of the installed torchcomms" |
    tee "$OUT/summary.md"
  exit 2
fi
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
CHECKS=${TORCHCOMMS_CHECKS:-window ours c10d conformance megatron bench}
want() { [[ " $CHECKS " == *" $1 "* ]]; }
for f in build window ours c10d conformance megatron bench; do : >"$OUT/$f.log"; done

# ---- build ---------------------------------------------------------------------------------------------
if [[ ${PREBUILT:-0} == 1 ]]; then
  record build SKIP 0 "PREBUILT=1: using $BUILD"
else
  run_step "$OUT/build.log" cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$PY" -DMESHCOMM_BUILD_PYTHON=ON -DMESHCOMM_BUILD_TORCH=ON -DMESHCOMM_BUILD_TORCHCOMMS=ON \
    -DMESHCOMM_TORCHCOMMS_INCLUDE_DIR="$TC_SRC" -DMESHCOMM_BUILD_TESTS=ON -DMESHCOMM_BUILD_TOOLS=ON \
    -DMESHCOMM_BUILD_EXAMPLES=OFF
  CONF=$SECS
  if [[ $RC -eq 0 ]]; then
    run_step "$OUT/build.log" ninja -C "$BUILD" -j "$JOBS" meshcomm_python meshcomm_gpu_tests meshcomm-run
  fi
  record build "$(result_of "$RC")" $((CONF + SECS)) "meshcomm_python + GPU tests with $PY"
fi
LIB=$BUILD/python/meshcomm/libmeshcomm_torchcomms.so
if [[ -f $LIB ]]; then
  ldd "$LIB" >>"$OUT/build.log" 2>&1
  if ldd "$LIB" | grep -q 'libstdc++\.so\.6' && [[ $(ldd "$LIB" | grep -c 'libmeshcomm\.so') -eq 1 ]] &&
    ldd "$LIB" | grep -q 'libtorchcomms\.so'; then
    record linkage PASS 0 "libmeshcomm_torchcomms: shared libstdc++, one libmeshcomm, the installed libtorchcomms"
  else
    record linkage FAIL 0 "libmeshcomm_torchcomms: see ldd in build.log"
  fi
else
  record linkage FAIL 0 "no $LIB"
fi

# ---- the Window primitive on every GPU -----------------------------------------------------------------
if want window; then
  run_step "$OUT/window.log" "$BUILD/tools/meshcomm-run" -n "$NGPUS" -- "$BUILD/tests/meshcomm_gpu_tests" \
    --gtest_filter='Windows.*'
  record window "$(result_of "$RC")" "$SECS" "GPU test Windows.* on $NGPUS ranks"
fi

# ---- our torchcomms suite, and the c10d suite ----------------------------------------------------------
summary_of() { grep -E '^[0-9]+ (passed|failed|skipped)|[0-9]+ passed|[0-9]+ failed' "$1" | tail -1; }
if want ours; then
  run_step "$OUT/ours.log" timeout 1800 "${TORCHRUN[@]}" -m pytest -q -rs -p timeout --timeout 300 "$REPO/tests/python/torchcomms"
  # The backend was built (MESHCOMM_BUILD_TORCHCOMMS=ON): a run in which nothing passed failed.
  if [[ $RC -eq 0 ]] && ! grep -qE '[0-9]+ passed' "$OUT/ours.log"; then RC=1; fi
  record ours "$(result_of "$RC")" "$SECS" "$(summary_of "$OUT/ours.log") (per rank)"
fi
if want c10d; then
  run_step "$OUT/c10d.log" timeout 1800 "${TORCHRUN[@]}" -m pytest -q -rs -x "$REPO/tests/python/torch"
  record c10d "$(result_of "$RC")" "$SECS" "$(summary_of "$OUT/c10d.log") (per rank)"
fi

# ---- torchcomms' own integration tests with TEST_BACKEND=meshcomm --------------------------------------
# One pytest run over the test files (torchrun starts once). The installed torchcomms package carries its
# tests (torchcomms/tests/integration/py): they run from there, so that they and their helpers import as
# the installed package (a checkout's copy would import its uncompiled torchcomms package instead). Each
# rank's output goes to its own file (torchrun --log-dir); rank 0's pytest summary (-rA) gives the per-file
# counts and the skip reasons in conformance.md.
if want conformance; then
  TESTS=$(cd / && "$PY" -c 'import os, torchcomms; print(os.path.dirname(torchcomms.__file__))')/tests/integration/py
  FILES=${CONFORMANCE_FILES:-$(cd "$TESTS" && ls ./*Test.py | xargs -n1 basename | tr '\n' ' ')}
  rm -rf "$OUT/conformance_ranks"
  # shellcheck disable=SC2086
  run_step "$OUT/conformance.log" bash -c "cd '$TESTS' && TEST_BACKEND=meshcomm TEST_DEVICE=cuda \
    timeout ${CONFORMANCE_TIMEOUT:-1500} ${TORCHRUN[*]} --log-dir '$OUT/conformance_ranks' -r 3 -m pytest -v -rs \
    -p no:cacheprovider -p timeout --timeout 240 --continue-on-collection-errors $FILES"
  rank0=$(find "$OUT/conformance_ranks" -path '*/0/stdout.log' | head -1)
  "$PY" "$REPO/scripts/lib/pytest_summary.py" "${rank0:-/dev/null}" $FILES >"$OUT/conformance.md"
  record conformance "$(result_of "$RC")" "$SECS" "$(tail -1 "$OUT/conformance.md")"
fi

# ---- Megatron-core through the torchcomms routing ------------------------------------------------------
if want megatron; then
  MEGA=$REPO/bench/torch/megatron_losses.py
  run_step "$OUT/megatron.log" "$PY" "$MEGA" --check-import
  if [[ $RC -eq 77 ]]; then
    record megatron SKIP "$SECS" "megatron-core does not import (megatron.log)"
  else
    t=$(date +%s)
    run_step "$OUT/megatron.log" timeout 900 "${TORCHRUN[@]}" "$MEGA" --backend nccl --out "$OUT/megatron_nccl.json"
    rc1=$RC
    run_step "$OUT/megatron.log" timeout 900 "${TORCHRUN[@]}" "$MEGA" --backend meshcomm --torchcomms \
      --out "$OUT/megatron_torchcomms.json"
    rc2=$RC
    RC=1
    if [[ $rc1 -eq 0 && $rc2 -eq 0 ]]; then
      run_step "$OUT/megatron.log" "$PY" "$MEGA" --compare "$OUT/megatron_nccl.json" "$OUT/megatron_torchcomms.json" \
        --rtol 1e-3
    fi
    record megatron "$(result_of "$RC")" $(($(date +%s) - t)) "NCCL (c10d) vs meshcomm (torchcomms routing), 50 steps"
  fi
fi

# ---- benchmark -----------------------------------------------------------------------------------------
if want bench; then
  # shellcheck disable=SC2086
  run_step "$OUT/bench.log" timeout 1500 "${TORCHRUN[@]}" "$REPO/bench/torch/torchcomms_bench.py" \
    --json "$OUT/bench.json" ${BENCH_ARGS:-}
  record bench "$(result_of "$RC")" "$SECS" "torchcomms ops vs NCCL (bench.log, bench.json)"
fi

{
  echo "# torchcomms-check $(date -Is) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$NGPUS"
  echo "commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null) ($(git -C "$REPO" status --porcelain 2>/dev/null | wc -l) changed files), python $PY, total $(($(date +%s) - T0))s"
  echo
  print_steps
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $ANY_FAIL
