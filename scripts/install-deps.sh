#!/usr/bin/env bash
# Installs what building and testing meshcomm needs on a Debian/Ubuntu machine that has the CUDA toolkit
# (nvcc) already. Idempotent; does nothing when everything is present. Needs root (or sudo) for apt.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v clang-format >/dev/null || need+=(clang-format)
command -v clang++ >/dev/null || need+=(clang)  # the fuzz targets (scripts/fuzz.sh: clang with libFuzzer)
# clang's libFuzzer runtime, where clang++ cannot link -fsanitize=fuzzer and the distribution packages it.
fuzz_trial=$(mktemp -d)
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$fuzz_trial/t.cc"
if command -v clang++ >/dev/null && ! clang++ -fsanitize=fuzzer "$fuzz_trial/t.cc" -o "$fuzz_trial/t" 2>/dev/null &&
  apt-cache show libclang-rt-dev >/dev/null 2>&1; then
  need+=(libclang-rt-dev)
fi
rm -rf "$fuzz_trial"
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -d /usr/src/googletest ]; then need+=(googletest libgtest-dev); fi
if [ ! -f /usr/include/nlohmann/json.hpp ]; then need+=(nlohmann-json3-dev); fi
# The Python package (docs/python.md) is built for and tested with the python3 on PATH: it needs pip and the
# interpreter's headers (Debian's python3-pip / python3-dev for the system python; pyenv and venvs have both).
py=$(command -v python3 || true)
if [ -z "$py" ]; then need+=(python3 python3-dev python3-pip python3-venv)
else
  "$py" -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
  "$py" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null || need+=(python3-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi
# From PyPI: nanobind and scikit-build-core (the extension's build; `pip install .` fetches them itself) and
# pytest (tests/python). PIP_BREAK_SYSTEM_PACKAGES lets pip install into a Debian system python (PEP 668) on
# a throwaway build machine; pyenv and venv interpreters ignore it.
py=$(command -v python3)
pyneed=()
"$py" -c 'import nanobind' 2>/dev/null || pyneed+=('nanobind>=2.4')
"$py" -c 'import scikit_build_core' 2>/dev/null || pyneed+=('scikit-build-core>=0.10')
"$py" -c 'import pytest' 2>/dev/null || pyneed+=(pytest)
if [ ${#pyneed[@]} -gt 0 ]; then
  echo "install-deps: pip installing ${pyneed[*]} for $py"
  PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip install --quiet "${pyneed[@]}"
fi
# Optional, for scripts/torch-check.sh's Megatron step (bench/torch/megatron_losses.py): megatron-core, only
# where this python has torch. Checked by torch.__version__: from the repository
# root, `import torch` alone also finds meshcomm's own torch/ directory as a namespace package.
if "$py" -c 'import torch; torch.__version__' 2>/dev/null && ! "$py" -c 'import megatron.core' 2>/dev/null; then
  # --no-deps: megatron-core requires torch, and pip must never replace the torch that is there.
  echo "install-deps: pip installing megatron-core (+ numpy, packaging) for $py (torch is there)"
  { PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip install --quiet --no-deps megatron-core &&
    PIP_BREAK_SYSTEM_PACKAGES=1 "$py" -m pip install --quiet numpy packaging; } ||
    echo "install-deps: megatron-core not installed (the Megatron check will SKIP)"
fi
