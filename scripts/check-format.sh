#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from .clang-format's layout (lists the files).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
if ! command -v clang-format >/dev/null; then echo "check-format: clang-format not installed" >&2; exit 1; fi
bad=()
while IFS= read -r f; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done < <(git ls-files '*.cc' '*.hpp' '*.cu' '*.h' '*.cuh')
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: these files need clang-format -i:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${PWD##*/}: all sources formatted"
