#!/usr/bin/env bash
# A bounded libFuzzer run: TARGET for SECONDS (default 60) from a scratch copy of CORPUS, so new inputs never
# land in the source tree; a finding fails the test and its input stays in the scratch directory (printed).
# The seed is fixed (MESHCOMM_FUZZ_SEED, default 1) so a CI run explores the same inputs until the code changes.
#   tests/fuzz/run_bounded.sh TARGET CORPUS [SECONDS]
set -u
target=$1 corpus=$2 seconds=${3:-60}
work=$(mktemp -d)
cp -r "$corpus"/. "$work/"
"$target" -seed="${MESHCOMM_FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/" "$work"
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "run_bounded: $target found a problem; inputs kept in $work" >&2
  exit "$rc"
fi
rm -rf "$work"
