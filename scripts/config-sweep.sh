#!/usr/bin/env bash
# Times one algorithm of one collective at several launch configs (blocks x threads), through a one-rule
# MESHCOMM_ALGO_TABLE per config; prints a table of time per size per config (meshcomm-bench rows).
#
#   scripts/config-sweep.sh OP ALGO "BLOCKS..." "THREADS..." [bench options...]
#   e.g. scripts/config-sweep.sh reduce reduce_scratch "32 64 128" "256 512" -b 1M -e 256M -f 16
#
# Environment: BUILD_DIR (default REPO/build), NRANKS (default: all GPUs).
set -u -o pipefail
if [[ $# -lt 4 ]]; then
  echo "usage: $0 OP ALGO \"BLOCKS...\" \"THREADS...\" [meshcomm-bench options]" >&2
  exit 2
fi
OP=$1 ALGO=$2 BLOCKS=$3 THREADS=$4
shift 4
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$REPO/build}
N=${NRANKS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
export NCCL_NVLS_ENABLE=0
TABLE=$(mktemp)
trap 'rm -f "$TABLE"' EXIT
for b in $BLOCKS; do
  for t in $THREADS; do
    echo "{\"rules\": [{\"collective\": \"$OP\", \"algorithm\": \"$ALGO\", \"blocks\": $b, \"threads\": $t}]}" >"$TABLE"
    echo "### $OP $ALGO blocks=$b threads=$t"
    MESHCOMM_ALGO_TABLE="$TABLE" "$BUILD/tools/meshcomm-run" -n "$N" -- "$BUILD/tools/meshcomm-bench" -o "$OP" "$@" |
      grep -E '^(\[0\] )?  [a-z_]+ +[0-9]+ ' || echo "(failed)"
  done
done
