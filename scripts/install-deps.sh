#!/usr/bin/env bash
# Installs what building and testing meshcomm needs on a Debian/Ubuntu machine that has the CUDA toolkit
# (nvcc) already. Idempotent; does nothing when everything is present. Needs root (or sudo) for apt.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v clang-format >/dev/null || need+=(clang-format)
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -d /usr/src/googletest ]; then need+=(googletest libgtest-dev); fi
if [ ! -f /usr/include/nlohmann/json.hpp ]; then need+=(nlohmann-json3-dev); fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
