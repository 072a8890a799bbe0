#!/usr/bin/env bash
# Compares meshcomm builds on this machine in one run: each build's meshcomm-bench, in interleaved order and
# several rounds (A B C, then C B A, ...), so drift of clocks and temperature falls on every build alike; then
# the median time per op and size of every build and its ratio to the first (scripts/lib/ab_summary.py).
#
#   scripts/ab-bench.sh [-n RANKS] [-r ROUNDS] OUT_DIR NAME=DIR [NAME=DIR ...] -- MESHCOMM_BENCH_ARGS...
#
# DIR: a build directory (or an unpacked copy of one) with libmeshcomm.so, tools/meshcomm-run and
# tools/meshcomm-bench. RANKS: default all local GPUs; ROUNDS: default 4. OUT_DIR receives ab.json (every run's
# rows and the summary) and ab.md (the summary table). Example, main against a change, 1 KiB-1 MiB:
#   scripts/ab-bench.sh /tmp/ab main=build-main change=build -- -o allreduce,allgather -b 1K -e 1M -f 4 -G
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ranks=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
rounds=4
while getopts "n:r:" o; do
  case $o in
    n) ranks=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 3 ]] || { sed -n '2,11p' "$0"; exit 2; }
out=$1
shift
names=() dirs=()
while [[ $# -gt 0 && $1 != -- ]]; do
  [[ $1 == *=* ]] || { echo "ab-bench: expected NAME=DIR, got '$1'" >&2; exit 2; }
  names+=("${1%%=*}")
  dirs+=("$(cd "${1#*=}" && pwd)")
  shift
done
[[ ${1:-} == -- ]] && shift
for d in "${dirs[@]}"; do
  [[ -x $d/tools/meshcomm-bench && -x $d/tools/meshcomm-run && -e $d/libmeshcomm.so ]] ||
    { echo "ab-bench: $d lacks libmeshcomm.so or tools/meshcomm-{run,bench}" >&2; exit 2; }
done
if [[ $ranks -lt 2 ]]; then
  echo "ab-bench: needs at least 2 GPUs (found $ranks)"
  exit 0
fi
mkdir -p "$out/runs"
runs=()
for ((round = 0; round < rounds; ++round)); do
  order=("${!names[@]}")
  if ((round % 2 == 1)); then
    order=()
    for ((i = ${#names[@]} - 1; i >= 0; --i)); do order+=("$i"); done
  fi
  for i in "${order[@]}"; do
    json="$out/runs/${names[$i]}_$round.json"
    echo "ab-bench: round $round, ${names[$i]} (${dirs[$i]})"
    LD_LIBRARY_PATH="${dirs[$i]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${dirs[$i]}/tools/meshcomm-run" -n "$ranks" -- \
      "${dirs[$i]}/tools/meshcomm-bench" "$@" --json "$json" >"$out/runs/${names[$i]}_$round.log" 2>&1
    runs+=("$json")
  done
done
python3 "$REPO/scripts/lib/ab_summary.py" "$out/ab.json" "$(IFS=,; echo "${names[*]}")" "${runs[@]}" | tee "$out/ab.md"
