#!/usr/bin/env bash
# Builds meshcomm and runs every GPU check on a bare GPU machine; logs and a summary go into OUT_DIR.
#
#   scripts/gpu-check.sh OUT_DIR
#
# Steps: environment and topology -> configure + build (Release, all cores) -> CPU unit tests -> GPU tests
# with 2 ranks and with all GPUs (everything, the collective suite included, each time) -> the killed-rank
# test (MESHCOMM_TEST_EXPECT_KILL mode) -> the ping-pong example -> PyTorch on the NCCL shim (LD_PRELOAD:
# tests/nccl_shim/torch_ops_check.py, bench/torch/train_losses.py DDP losses vs NCCL; skipped without torch) -> meshcomm-channel-bench on 2 GPUs (--json)
# -> meshcomm-bench -o all vs NCCL on all GPUs, allreduce on registered buffers (--register) on all GPUs, and
# -o all on 2 GPUs (--json). A failed step is recorded and the script goes on; it exits 1 at the end if any
# step failed. OUT_DIR receives at most 8 files:
#   build.log (environment, configure, build, CPU unit tests) gpu2.log gpuN.log
#   extra.log (failure test, example, the benchmarks' output) bench.json (channel bench)
#   coll_bench.json (collective bench, all GPUs) coll_bench2.json (collective bench, 2 GPUs, when there are
#   more) summary.md (step table + benchmark tables; printed at the end)
# Runtime budget (4x H200): build ~2-3 min, GPU tests ~1 min (2 ranks) + ~3 min (all GPUs), channel bench
# ~1 min, collective bench ~1-2 min.
# Environment: BUILD_DIR (default REPO/build), JOBS (default: all cores), PREBUILT=1 (use the binaries
# already in BUILD_DIR, e.g. built on another machine with the same CUDA, instead of building; the summary
# says so; the unit tests then run as one binary instead of through ctest).
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/lib/check-steps.sh"  # record, run_step, result_of, print_steps, check_init; NVLS off
check_init "$@"
BUILD=${BUILD_DIR:-$REPO/build}

RUN="$BUILD/tools/meshcomm-run"
GPU_TESTS="$BUILD/tests/meshcomm_gpu_tests"
EXAMPLE="$BUILD/examples/meshcomm-example-ping-pong"
BENCH="$BUILD/tools/meshcomm-channel-bench"
COLL_BENCH="$BUILD/tools/meshcomm-bench"
TMP=$(mktemp -d)
TORCH_PY=$(find_torch_python)  # for the NCCL-shim step
trap 'rm -rf "$TMP"' EXIT

T0=$(date +%s)

# ---- 1. environment ------------------------------------------------------------------------------------
{
  echo "date: $(date -Is)"
  echo "host: $(hostname)  cores: $(nproc)  repo: $REPO  build: $BUILD"
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  echo
  (cd "$REPO" && git log -1 --oneline 2>/dev/null; git status --short 2>/dev/null | head -20)
  echo
  nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo
  nvidia-smi topo -m 2>&1 || true
  echo
  nvcc --version 2>&1 | tail -2 || true
  cmake --version 2>&1 | head -1 || true
  ninja --version 2>&1 || true
  c++ --version 2>&1 | head -1 || true
} >"$OUT/build.log" 2>&1
NGPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
NGPUS=${NGPUS:-0}
record environment PASS 0 "$NGPUS GPU(s); see build.log"

# ---- 2. configure + build ------------------------------------------------------------------------------
GTEST_ARG=()
if [[ -d $REPO/.deps/googletest ]]; then
  # Used by CMake only when no installed GTest is found.
  GTEST_ARG=(-DMESHCOMM_GTEST_SOURCE_DIR="$REPO/.deps/googletest")
fi
BUILT=0
if [[ ${PREBUILT:-0} == 1 ]]; then
  if [[ -x $GPU_TESTS && -f $BUILD/libmeshcomm.so ]]; then
    BUILT=1
    record build SKIP 0 "PREBUILT=1: binaries in $BUILD were built elsewhere"
  else
    record build FAIL 0 "PREBUILT=1 but $GPU_TESTS or libmeshcomm.so is missing"
  fi
else
  run_step "$OUT/build.log" timeout 120 cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${GTEST_ARG[@]}"
fi
if [[ ${PREBUILT:-0} == 1 ]]; then
  :
elif [[ $RC -eq 0 ]]; then
  CONF_SECS=$SECS
  run_step "$OUT/build.log" timeout 600 ninja -C "$BUILD" -j "$JOBS"
  [[ $RC -eq 0 ]] && BUILT=1
  record build "$(result_of "$RC")" $((SECS + CONF_SECS)) "ninja -j $JOBS"
else
  record build FAIL "$SECS" "cmake configure failed"
fi

not_built() { record "$1" FAIL 0 "not built"; }

# nccl_loadable: true when meshcomm-bench --compare nccl can dlopen NCCL (MESHCOMM_BENCH_NCCL_LIB, the
# loader's search path, or a pip wheel nvidia-nccl-cu*: then MESHCOMM_BENCH_NCCL_LIB is exported).
nccl_loadable() {
  local lib=${MESHCOMM_BENCH_NCCL_LIB:-libnccl.so.2}
  if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$lib" 2>/dev/null; then return 0; fi
  [[ -z ${MESHCOMM_BENCH_NCCL_LIB:-} ]] && ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2' && return 0
  local wheel
  wheel=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  if [[ -n $wheel && -f $wheel ]]; then
    export MESHCOMM_BENCH_NCCL_LIB=$wheel
    return 0
  fi
  return 1
}

# ---- 2b. libmeshcomm links the shared libstdc++ (no private static copy) -----------------------------
if [[ $BUILT -eq 1 ]]; then
  ldd "$BUILD/libmeshcomm.so" >>"$OUT/build.log" 2>&1
  if ldd "$BUILD/libmeshcomm.so" | grep -q 'libstdc++\.so\.6'; then
    record shared-libstdcxx PASS 0 "$(ldd "$BUILD/libmeshcomm.so" | grep -o 'libstdc++[^ ]* => [^ ]*')"
  else
    record shared-libstdcxx FAIL 0 "libmeshcomm.so does not load libstdc++.so.6 (static copy?)"
  fi
fi

# ---- 3. CPU unit tests ---------------------------------------------------------------------------------
# (appended to build.log: OUT_DIR holds at most 8 files)
if [[ $BUILT -eq 1 ]]; then
  if [[ ${PREBUILT:-0} == 1 ]]; then
    run_step "$TMP/unit.out" "$BUILD/tests/meshcomm_unit_tests"
  else
    run_step "$TMP/unit.out" ctest --test-dir "$BUILD" -E '^gpu_' --output-on-failure -j 16 --timeout 180
  fi
  cat "$TMP/unit.out" >>"$OUT/build.log"
  # ctest: "N% tests passed, M tests failed out of T"; one gtest binary: "PASSED ] N tests." + "M FAILED TEST(S)".
  UNIT_NOTE=$(grep -Eo '[0-9]+% tests passed.*|PASSED .*|[0-9]+ FAILED TESTS?' "$TMP/unit.out" | tail -2 | tr '\n' ' ')
  record unit-tests "$(result_of "$RC")" "$SECS" "${UNIT_NOTE% }"
else
  not_built unit-tests
fi

# gpu_step NAME LOG NRANKS TIMEOUT [GTEST ARGS...]: the GPU test binary under meshcomm-run.
gpu_step() {
  local name=$1 log=$2 n=$3 limit=$4
  shift 4
  : >"$log"
  if [[ $BUILT -ne 1 ]]; then
    not_built "$name"
    return
  fi
  run_step "$log" "$RUN" -n "$n" --timeout "$limit" -- "$GPU_TESTS" "$@"
  local note
  note=$(grep -Eo 'meshcomm GPU tests: .*|SKIPPED: .*' "$log" | tail -1)
  record "$name" "$(result_of "$RC")" "$SECS" "${note:-exit status $RC}"
}

# ---- 4. GPU tests: 2 ranks, then all GPUs --------------------------------------------------------------
# Everything (the collective suite tests/gpu/test_collectives.cu included, ~1 min) on 2 ranks, then on all
# GPUs where there are more than 2.
gpu_step gpu-tests-2 "$OUT/gpu2.log" 2 420
if [[ $NGPUS -gt 2 ]]; then
  gpu_step "gpu-tests-$NGPUS" "$OUT/gpuN.log" "$NGPUS" 420
else
  record gpu-tests-all SKIP 0 "$NGPUS GPU(s): covered by the 2-rank run"
fi

# ---- 5. killed-rank test, example, benchmark (one log) -------------------------------------------------
: >"$OUT/extra.log"
if [[ $BUILT -eq 1 ]]; then
  # Rank 1 dies on purpose (_exit(0)); rank 0 must report it. Pass = exit 0 and rank 0's marker line.
  run_step "$OUT/extra.log" env MESHCOMM_TEST_EXPECT_KILL=1 "$RUN" -n 2 --timeout 120 -- "$GPU_TESTS" \
    --gtest_filter='Failure*'
  if [[ $RC -eq 77 ]]; then
    record killed-rank SKIP "$SECS" "fewer than 2 GPUs"
  elif [[ $RC -eq 0 ]] && grep -q 'MESHCOMM-FAILURE-TEST: killed peer reported' "$OUT/extra.log"; then
    record killed-rank PASS "$SECS" "rank 1 killed, rank 0 reported it (host + device)"
  else
    record killed-rank FAIL "$SECS" "exit status $RC or no 'killed peer reported' line"
  fi

  run_step "$OUT/extra.log" "$RUN" -n 2 --timeout 60 -- "$EXAMPLE"
  if [[ $RC -eq 0 ]] && grep -q 'all answers correct' "$OUT/extra.log"; then
    record example-ping-pong PASS "$SECS" "$(grep -Eo 'ping_pong: .*' "$OUT/extra.log" | tail -1 | cut -c1-90)"
  else
    record example-ping-pong "$(result_of "$((RC == 0 ? 1 : RC))")" "$SECS" "exit status $RC"
  fi

  # PyTorch on the NCCL shim (LD_PRELOAD): torch.distributed ops vs host references, then DDP losses vs NCCL.
  if [[ -z $TORCH_PY ]]; then
    record nccl-shim-torch SKIP 0 "no python with torch (set TORCH_PYTHON)"
  elif [[ $NGPUS -lt 2 ]]; then
    record nccl-shim-torch SKIP 0 "fewer than 2 GPUs"
  else
    TORCHRUN=("$TORCH_PY" -m torch.distributed.run --nproc_per_node "$NGPUS")
    SHIM=$BUILD/libmeshcomm_nccl.so.2
    run_step "$OUT/extra.log" env LD_PRELOAD="$SHIM" LD_LIBRARY_PATH="$BUILD:${LD_LIBRARY_PATH:-}" \
      timeout 300 "${TORCHRUN[@]}" "$REPO/tests/nccl_shim/torch_ops_check.py" --expect-shim
    OPS_RC=$RC OPS_SECS=$SECS
    run_step "$OUT/extra.log" timeout 200 "${TORCHRUN[@]}" "$REPO/bench/torch/train_losses.py" \
      --out "$TMP/ddp_nccl.json"
    run_step "$OUT/extra.log" env LD_PRELOAD="$SHIM" LD_LIBRARY_PATH="$BUILD:${LD_LIBRARY_PATH:-}" \
      timeout 200 "${TORCHRUN[@]}" "$REPO/bench/torch/train_losses.py" --expect-shim \
      --out "$TMP/ddp_shim.json"
    run_step "$OUT/extra.log" "$TORCH_PY" "$REPO/bench/torch/train_losses.py" --compare \
      "$TMP/ddp_nccl.json" "$TMP/ddp_shim.json"
    DDP_NOTE=$(grep -Eo '[0-9]+ steps: max relative loss difference [^;]*' "$OUT/extra.log" | tail -1)
    if [[ $OPS_RC -eq 0 && $RC -eq 0 ]]; then
      record nccl-shim-torch PASS $((OPS_SECS + SECS)) "ops check + DDP: $DDP_NOTE"
    else
      record nccl-shim-torch FAIL $((OPS_SECS + SECS)) "ops check exit $OPS_RC; DDP: ${DDP_NOTE:-exit $RC}"
    fi
  fi

  run_step "$TMP/bench.out" "$RUN" -n 2 --timeout 300 -- "$BENCH" --json "$OUT/bench.json"
  cat "$TMP/bench.out" >>"$OUT/extra.log"
  if [[ $RC -eq 0 ]] && grep -q '^\[0\] TARGET.*FAIL' "$TMP/bench.out"; then
    record channel-bench PASS "$SECS" "ran; below the 90% target: see the table"
  else
    record channel-bench "$(result_of "$RC")" "$SECS" "meshcomm-channel-bench -n 2"
  fi

  # Collectives vs NCCL on all GPUs (NCCL loaded at run time; without it the bench runs meshcomm only).
  COLL_ARGS=(-o all -d bfloat16 -b 1K -e 1G -f 4 --graph-max 16M -c 1)
  if ! nccl_loadable; then
    NCCL_NOTE="libnccl.so.2 not found: meshcomm only"
  else
    COLL_ARGS+=(--compare nccl)
    NCCL_NOTE="vs NCCL"
  fi
  run_step "$TMP/coll.out" "$RUN" -n "$NGPUS" --timeout 300 -- "$COLL_BENCH" "${COLL_ARGS[@]}" \
    --json "$OUT/coll_bench.json"
  cat "$TMP/coll.out" >>"$OUT/extra.log"
  record coll-bench "$(result_of "$RC")" "$SECS" "meshcomm-bench -o all -n $NGPUS ($NCCL_NOTE)"
  # allreduce on registered buffers (Comm::registerBuffer: allreduce_zerocopy above 512 KiB); NCCL unregistered.
  run_step "$TMP/collreg.out" "$RUN" -n "$NGPUS" --timeout 200 -- "$COLL_BENCH" "${COLL_ARGS[@]}" -o allreduce \
    -b 1M --register --json "$TMP/coll_bench_registered.json"
  cat "$TMP/collreg.out" >>"$OUT/extra.log"
  record coll-bench-registered "$(result_of "$RC")" "$SECS" "meshcomm-bench -o allreduce --register -n $NGPUS ($NCCL_NOTE)"
  if [[ $NGPUS -gt 2 ]]; then
    run_step "$TMP/coll2.out" "$RUN" -n 2 --timeout 300 -- "$COLL_BENCH" "${COLL_ARGS[@]}" \
      --json "$OUT/coll_bench2.json"
    cat "$TMP/coll2.out" >>"$OUT/extra.log"
    record coll-bench-2 "$(result_of "$RC")" "$SECS" "meshcomm-bench -o all -n 2 ($NCCL_NOTE)"
  fi
else
  not_built killed-rank
  not_built example-ping-pong
  not_built channel-bench
  not_built coll-bench
fi

# ---- summary -------------------------------------------------------------------------------------------
{
  echo "# meshcomm GPU check"
  echo
  echo "$(date -Is) on $(hostname), $NGPUS GPU(s), total $(($(date +%s) - T0)) s"
  echo
  print_steps
  for log in gpu2.log gpuN.log; do
    if [[ -s $OUT/$log ]] && grep -qE '\[  FAILED  \]|: Failure$' "$OUT/$log"; then
      echo
      echo "Failures in $log (first 40 lines):"
      echo '```'
      grep -E '\[  FAILED  \]|: Failure$|rror' "$OUT/$log" | head -40
      echo '```'
    fi
  done
  if [[ -s $TMP/bench.out ]]; then
    echo
    echo "## meshcomm-channel-bench (rank 0 -> rank 1)"
    echo
    echo '```'
    # The final table: from its header line to the end, without the launcher's "[0] " prefix.
    sed -n '/^\[0\] test  /,$p' "$TMP/bench.out" | sed 's/^\[0\] //' | grep -v '^\[[0-9]*\]'
    echo '```'
  fi
  for jf in "$OUT/coll_bench.json" "$OUT/coll_bench2.json" "$TMP/coll_bench_registered.json"; do
    [[ -s $jf ]] || continue
    echo
    echo "## meshcomm-bench ($(basename "$jf"): bfloat16; ratio = NCCL time / meshcomm time, > 1: meshcomm faster)"
    echo
    python3 - "$jf" <<'PY' || echo "(python3 not available: see $jf)"
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d.get('nranks')} x {d.get('device')}, NCCL {d.get('nccl_version') or 'not compared'}, time = {d.get('time')}")
print()
print("| op | size (B) | timing | algorithm | meshcomm us | NCCL us | ratio | #wrong |")
print("|---|---|---|---|---|---|---|---|")
flagged = 0
for r in d["rows"]:
    ratio = r.get("ratio")
    flag = ""
    if ratio is not None and ratio < 0.9:
        flag = " **< 0.9**"
        flagged += 1
    wrong = (r.get("oop_wrong") or 0) + (r.get("ip_wrong") or 0)
    f = lambda v: "-" if v is None else f"{v:.2f}"
    print(f"| {r['op']} | {r['size']} | {r['timing']} | {r['algo']} | {f(r['oop_time_us'])} | "
          f"{f(r.get('nccl_time_us'))} | {'-' if ratio is None else f'{ratio:.3f}'}{flag} | {wrong} |")
print()
print(f"{flagged} row(s) with ratio < 0.9 (meshcomm more than 10% slower than NCCL)")
PY
  done
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit "$ANY_FAIL"
