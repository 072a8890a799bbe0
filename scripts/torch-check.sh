#!/usr/bin/env bash
# Builds the Python package with the torch backend and runs the torch backend's acceptance checks on the GPUs
# of this machine; logs and a summary go into OUT_DIR (docs/torch.md).
#
#   scripts/torch-check.sh OUT_DIR
#
# Steps: build (libmeshcomm, _meshcomm, _torch_backend: the meshcomm_python target, Release, all cores) ->
# the c10d pytest suite under torchrun (every op vs a host reference, sync/async, graph capture, subgroups,
# errors) -> the package's pytest (tests/python: CPU and GPU, compile_native and plans included) -> the four
# examples/torch/ -> bench/torch/train_losses.py with DDP and with FSDP2, NCCL vs meshcomm in one process
# taking turns step by step (compare_stacks --paired; losses rel. diff <= 1e-3, step time ratio) ->
# bench/torch/megatron_losses.py: a Megatron-core GPT, tensor + sequence parallel over all ranks, NCCL vs
# meshcomm (same limits; SKIP when megatron-core does not import) -> bench/torch/moe_alltoall_soak.py (10^4
# calls with changing splits, memory flat) -> meshcomm.ep: tests/python/torch/test_ep*.py (test_ep.py again
# with MESHCOMM_EP_NODE_SIZE = half the ranks: the internode mode on one host) and
# bench/torch/ep_bench.py and bench/torch/megatron_moe.py (Megatron's flex/DeepEP dispatcher on meshcomm.ep
# vs its alltoall dispatcher; docs/ep.md; ep*.log, ep_bench.json, megatron_moe.json) -> bench/torch/plans_bench.py
# (the shipped meshcomm.dsl plans against the fastest native algorithm; plans_bench.json) -> bench/torch/host_overhead.py (torch call over the raw call
# <= 5 us). A failed step is recorded and the script goes on; exit 1 at the end if any failed. OUT_DIR receives: build.log pytest.log train.log
# megatron.log moe.log overhead.log summary.md.
# Environment: TORCH_PYTHON (a python with torch, nanobind and scikit-build-core's deps importable; default:
# the first of python3, /opt/torch/.venv/bin/python that imports torch), BUILD_DIR (default REPO/build-torch),
# JOBS, PREBUILT=1 (use BUILD_DIR as it is), NPROC (ranks; default: all GPUs), STEP_TIME_RATIO (the step
# time limit of meshcomm over NCCL, default 1.0; 0 reports the ratio without failing on it), TRAIN_RUNS (DDP/FSDP2
# paired runs, Megatron runs per stack alternated; the ratio compares the medians of the runs' median step
# times; default 3),
# TORCH_CHECKS (a subset of
# "c10d package examples train megatron moe ep plans overhead" to run after the build, so the checks fit several
# shorter calls).
set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO/scripts/lib/check-steps.sh"  # record, run_step, result_of, print_steps, check_init; NVLS off
check_init "$@"
BUILD=${BUILD_DIR:-$REPO/build-torch}

T0=$(date +%s)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

torch_gpu_init torch-check  # PY, NGPUS, NP, TORCHRUN
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
CHECKS=${TORCH_CHECKS:-c10d package examples train megatron moe ep plans overhead}
want() { [[ " $CHECKS " == *" $1 "* ]]; }
: >"$OUT/pytest.log"
: >"$OUT/megatron.log"
: >"$OUT/moe.log"
: >"$OUT/overhead.log"
: >"$OUT/ep.log"
: >"$OUT/plans.log"

# ---- build ---------------------------------------------------------------------------------------------
: >"$OUT/build.log"
if [[ ${PREBUILT:-0} == 1 ]]; then
  record build SKIP 0 "PREBUILT=1: using $BUILD"
else
  run_step "$OUT/build.log" cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$PY" -DMESHCOMM_BUILD_PYTHON=ON -DMESHCOMM_BUILD_TORCH=ON -DMESHCOMM_BUILD_TESTS=OFF \
    -DMESHCOMM_BUILD_TOOLS=OFF -DMESHCOMM_BUILD_EXAMPLES=OFF
  CONF=$SECS
  if [[ $RC -eq 0 ]]; then
    run_step "$OUT/build.log" ninja -C "$BUILD" -j "$JOBS" meshcomm_python
  fi
  record build "$(result_of "$RC")" $((CONF + SECS)) "meshcomm_python with $PY"
fi
for so in "$BUILD"/python/meshcomm/_torch_backend*.so; do
  ldd "$so" >>"$OUT/build.log" 2>&1
  if ldd "$so" | grep -q 'libstdc++\.so\.6' && [[ $(ldd "$so" | grep -c 'libmeshcomm\.so') -eq 1 ]]; then
    record linkage PASS 0 "_torch_backend: shared libstdc++, one libmeshcomm"
  else
    record linkage FAIL 0 "_torch_backend: see ldd in build.log"
  fi
done

# ---- pytest suite --------------------------------------------------------------------------------------
# -x: a test failing on one rank leaves the others inside its collective, so stop at the first failure.
if want c10d; then
  run_step "$OUT/pytest.log" timeout 240 "${TORCHRUN[@]}" -m pytest -q -rs -x --durations=8 "$REPO/tests/python/torch" \
    --ignore="$REPO/tests/python/torch/test_ep.py" --ignore="$REPO/tests/python/torch/test_ep_low_latency.py"
  record c10d-pytest "$(result_of "$RC")" "$SECS" "$(grep -Eo '[0-9]+ (passed|failed)[^=]*' "$OUT/pytest.log" | tail -1)"
fi
# The package's own tests (CPU + GPU: collectives, execute, DLPack, compile_native on 2 GPUs); needs pytest.
export MESHCOMM_NATIVE_CACHE=$TMP/native-cache
if want package; then
  run_step "$OUT/pytest.log" timeout 600 "$PY" -m pytest -q -rs --durations=5 "$REPO/tests/python" \
    --ignore="$REPO/tests/python/torch"
  record package-pytest "$(result_of "$RC")" "$SECS" \
    "$(grep -Eo '[0-9]+ (passed|failed)[^=]*' "$OUT/pytest.log" | tail -1)"
fi
# The three ways of using meshcomm from torch (docs/torch.md, docs/python.md, docs/native.md).
for example in c10d_backend algorithm_execute native_algorithm dsl_algorithm; do
  want examples || break
  run_step "$OUT/pytest.log" timeout 180 "${TORCHRUN[@]}" "$REPO/examples/torch/$example.py"
  record "example-$example" "$(result_of "$RC")" "$SECS" "examples/torch/$example.py"
done

# ---- DDP and FSDP2: losses and step time, NCCL vs meshcomm ---------------------------------------------
# The result files of the TRAIN_RUNS runs of stack BE in comparison NAME, comma-separated (SCRIPT --compare
# takes such lists).
run_files() {
  local name=$1 be=$2 run files=""
  for ((run = 1; run <= ${TRAIN_RUNS:-3}; ++run)); do files+="${files:+,}$TMP/$name-$be-$run.json"; done
  echo "$files"
}

# compare_stacks [--paired] LOG NAME SCRIPT [ARGS...]: TRAIN_RUNS runs of SCRIPT per stack, alternated (nccl,
# meshcomm, nccl, ...), or with --paired TRAIN_RUNS runs of SCRIPT --paired (both stacks in one process,
# stepping in turns on the same batches: host drift between processes, which moved the host-bound DDP/FSDP2
# step by +-10%, then hits both alike); then SCRIPT --compare: losses within 1e-3 of NCCL's first run; the
# step time of each side is the median of its runs' medians, so one slow process does not decide the ratio.
compare_stacks() {
  local paired=0
  if [[ $1 == --paired ]]; then
    paired=1
    shift
  fi
  local log=$1 name=$2 script=$3 run be
  shift 3
  for ((run = 1; run <= ${TRAIN_RUNS:-3}; ++run)); do
    if ((paired)); then
      run_step "$log" timeout 300 "${TORCHRUN[@]}" "$script" "$@" --paired --out "$TMP/$name-nccl-$run.json" \
        --out-b "$TMP/$name-meshcomm-$run.json"
    else
      for be in nccl meshcomm; do
        run_step "$log" timeout 300 "${TORCHRUN[@]}" "$script" "$@" --backend "$be" --out "$TMP/$name-$be-$run.json"
      done
    fi
  done
  run_step "$log" "$PY" "$script" --compare "$(run_files "$name" nccl)" "$(run_files "$name" meshcomm)" \
    --rtol 1e-3 --max-time-ratio "${STEP_TIME_RATIO:-1.0}"
  record "$name-vs-nccl" "$(result_of "$RC")" "$SECS" "$(grep -Eo '[0-9]+ steps: .*' "$log" | tail -1)"
}

: >"$OUT/train.log"
for par in ddp fsdp2; do
  want train || break
  compare_stacks --paired "$OUT/train.log" "$par" "$REPO/bench/torch/train_losses.py" --parallel "$par"
done

# ---- Megatron-core tensor + sequence parallelism: losses and step time, NCCL vs meshcomm ---------------
# The script exits 77 when megatron.core does not import, but torchrun reports a worker's 77 as 1: ask it
# first without torchrun (--check-import), and SKIP both runs on 77.
if want megatron; then
  run_step "$OUT/megatron.log" "$PY" "$REPO/bench/torch/megatron_losses.py" --check-import
  if [[ $RC -ne 0 ]]; then
    NOTE=$(grep -Eo 'megatron.core does not import.*' "$OUT/megatron.log" | tail -1 | cut -c1-160)
    record megatron-vs-nccl "$(result_of "$RC")" "$SECS" "${NOTE:-megatron_losses.py --check-import failed: megatron.log}"
  else
    compare_stacks "$OUT/megatron.log" megatron "$REPO/bench/torch/megatron_losses.py"
  fi
fi

# ---- MoE all_to_all_single soak, host overhead ---------------------------------------------------------
if want moe; then
  run_step "$OUT/moe.log" timeout 300 "${TORCHRUN[@]}" "$REPO/bench/torch/moe_alltoall_soak.py"
  record moe-soak "$(result_of "$RC")" "$SECS" "$(grep -Eo 'rank 0/.*' "$OUT/moe.log" | tail -1 | cut -c1-160)"
fi
if want ep; then
  run_step "$OUT/ep.log" timeout 300 "${TORCHRUN[@]}" -m pytest -q -rs -x --durations=8 "$REPO/tests/python/torch/test_ep.py" \
    "$REPO/tests/python/torch/test_ep_low_latency.py"
  record ep-pytest "$(result_of "$RC")" "$SECS" "$(grep -Eo '[0-9]+ (passed|failed)[^=]*' "$OUT/ep.log" | tail -1)"
  # The normal mode across nodes, emulated on this host: nodes of half the ranks (one rank each on 2 GPUs),
  # NVLink inside a node, PortChannels over TCP between nodes.
  EP_NODE_SIZE=$((NP / 2 > 0 ? NP / 2 : 1))
  run_step "$OUT/ep-internode.log" timeout 400 env MESHCOMM_EP_NODE_SIZE=$EP_NODE_SIZE MESHCOMM_EP_SOAK_ROUNDS=2000 \
    "${TORCHRUN[@]}" -m pytest -q -rs -x --durations=8 "$REPO/tests/python/torch/test_ep.py"
  record ep-internode "$(result_of "$RC")" "$SECS" \
    "nodes of $EP_NODE_SIZE: $(grep -Eo '[0-9]+ (passed|failed)[^=]*' "$OUT/ep-internode.log" | tail -1)"
  run_step "$OUT/ep-bench.log" timeout 300 "${TORCHRUN[@]}" "$REPO/bench/torch/ep_bench.py" --low-latency --json "$OUT/ep_bench.json"
  record ep-bench "$(result_of "$RC")" "$SECS" "$(grep -E '^\| meshcomm' "$OUT/ep-bench.log" | tail -1 | cut -c1-160)"
  run_step "$OUT/ep-megatron.log" timeout 300 "${TORCHRUN[@]}" "$REPO/bench/torch/megatron_moe.py" \
    --json "$OUT/megatron_moe.json"
  record ep-megatron "$(result_of "$RC")" "$SECS" "$(grep -Eo 'megatron_moe: .*' "$OUT/ep-megatron.log" | tail -1 | cut -c1-200)"
fi
if want plans; then
  run_step "$OUT/plans.log" timeout 400 "${TORCHRUN[@]}" "$REPO/bench/torch/plans_bench.py" --json "$OUT/plans_bench.json"
  record plans-bench "$(result_of "$RC")" "$SECS" "$(grep -Eo '[0-9]+ wrong' "$OUT/plans.log" | tail -1)"
fi
if want overhead; then
  run_step "$OUT/overhead.log" timeout 180 "${TORCHRUN[@]}" "$REPO/bench/torch/host_overhead.py"
  record host-overhead "$(result_of "$RC")" "$SECS" "$(grep -Eo 'host overhead of .*' "$OUT/overhead.log" | tail -1)"
fi

{
  echo "# meshcomm torch check"
  echo
  echo "$(date -Is) on $(hostname), $NP rank(s), total $(($(date +%s) - T0)) s, $("$PY" -c 'import torch; print("torch", torch.__version__)')"
  echo "commit $(cd "$REPO" && git log -1 --format='%h %s' 2>/dev/null | cut -c1-80)"
  echo
  print_steps
  echo
  echo '```'
  grep -E '^(\| |allreduce SUM)' "$OUT/overhead.log"
  grep -Eo 'rank [0-9]+/[0-9]+: [0-9]+ eager calls.*' "$OUT/moe.log"
  grep -E '^(ddp|fsdp2)/' "$OUT/train.log"
  grep -E '^megatron/' "$OUT/megatron.log"
  grep -E '^rank [0-9]+/[0-9]+: my_oneshot_allreduce' "$OUT/pytest.log"
  echo '```'
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit "$ANY_FAIL"
