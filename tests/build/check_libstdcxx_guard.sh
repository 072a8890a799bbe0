#!/usr/bin/env bash
# The configure-time guard of cmake/SharedLibstdcxx.cmake against a CUDA host compiler that links libstdc++
# statically (a wrapper whose library path holds only libstdc++.a, like some GPU images' CUDAHOSTCXX):
#   1. CUDAHOSTCXX=<wrapper>: configuring warns and uses /usr/bin/g++ as nvcc's host compiler;
#   2. -DCMAKE_CUDA_HOST_COMPILER=<wrapper> (an explicit choice): configuring fails, naming both compilers;
#   3. CXX=<wrapper> (the C++ compiler the environment names): configuring warns and uses /usr/bin/g++.
#
#   tests/build/check_libstdcxx_guard.sh SOURCE_DIR
# Exit 77 (skip) without /usr/bin/g++, nvcc or a static libstdc++.a to build the wrapper from.
set -u -o pipefail
SRC=$1
command -v nvcc >/dev/null || { echo "SKIP: nvcc not found"; exit 77; }
[[ -x /usr/bin/g++ ]] || { echo "SKIP: /usr/bin/g++ not found"; exit 77; }
STATIC=$(/usr/bin/g++ -print-file-name=libstdc++.a)
[[ $STATIC == /* && -f $STATIC ]] || { echo "SKIP: no libstdc++.a for /usr/bin/g++"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/wrapper/lib"
cp "$STATIC" "$TMP/wrapper/lib/"
cat >"$TMP/wrapper/g++" <<WRAP
#!/bin/sh
for a in "\$@"; do [ "\$a" = "-print-file-name=libstdc++.so" ] && { echo libstdc++.so; exit 0; }; done
exec /usr/bin/g++ -L$TMP/wrapper/lib "\$@"
WRAP
chmod +x "$TMP/wrapper/g++"
OPTS=(-DMESHCOMM_BUILD_TESTS=OFF -DMESHCOMM_BUILD_TOOLS=OFF -DMESHCOMM_BUILD_EXAMPLES=OFF -DMESHCOMM_BUILD_PYTHON=OFF)
fail=0

CXX=/usr/bin/g++ CUDAHOSTCXX="$TMP/wrapper/g++" cmake -S "$SRC" -B "$TMP/env" "${OPTS[@]}" >"$TMP/env.log" 2>&1
rc=$?
host=$(grep -h 'set(CMAKE_CUDA_HOST_COMPILER ' "$TMP"/env/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null)
# CMake wraps its messages: compare the log as one line.
one_line() { tr -s ' \n' '  ' <"$1"; }
if [[ $rc -eq 0 ]] && one_line "$TMP/env.log" | grep -q "finds no shared libstdc++: using /usr/bin/g++" &&
  [[ $host == *'"/usr/bin/g++"'* ]]; then
  echo "PASS: CUDAHOSTCXX=<static wrapper> -> warning, nvcc host compiler /usr/bin/g++"
else
  echo "FAIL: CUDAHOSTCXX=<static wrapper>: exit $rc, host compiler line: ${host:-none}"; tail -20 "$TMP/env.log"; fail=1
fi

CXX=/usr/bin/g++ cmake -S "$SRC" -B "$TMP/explicit" -DCMAKE_CUDA_HOST_COMPILER="$TMP/wrapper/g++" "${OPTS[@]}" \
  >"$TMP/explicit.log" 2>&1
rc=$?
if [[ $rc -ne 0 ]] && one_line "$TMP/explicit.log" | grep -q "link libstdc++ statically"; then
  echo "PASS: -DCMAKE_CUDA_HOST_COMPILER=<static wrapper> -> configure refused"
else
  echo "FAIL: -DCMAKE_CUDA_HOST_COMPILER=<static wrapper>: exit $rc"; tail -20 "$TMP/explicit.log"; fail=1
fi
CXX="$TMP/wrapper/g++" CUDAHOSTCXX=/usr/bin/g++ cmake -S "$SRC" -B "$TMP/cxx" "${OPTS[@]}" >"$TMP/cxx.log" 2>&1
rc=$?
cxx=$(grep -h 'set(CMAKE_CXX_COMPILER ' "$TMP"/cxx/CMakeFiles/*/CMakeCXXCompiler.cmake 2>/dev/null)
if [[ $rc -eq 0 ]] && one_line "$TMP/cxx.log" | grep -q "finds no shared libstdc++: using /usr/bin/g++" &&
  [[ $cxx == *'"/usr/bin/g++"'* ]]; then
  echo "PASS: CXX=<static wrapper> -> warning, C++ compiler /usr/bin/g++"
else
  echo "FAIL: CXX=<static wrapper>: exit $rc, C++ compiler line: ${cxx:-none}"; tail -20 "$TMP/cxx.log"; fail=1
fi
exit $fail
