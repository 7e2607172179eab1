#!/usr/bin/env bash
# Builds the library and the tools (not the tests) with clang in build-clang/: the check that the code is not tied
# to GCC, as macOS's AppleClang needs (docs/macos.md). It runs here on Linux, so it says nothing about macOS's
# system calls (scripts/check_portability.py covers those) and runs nothing, which is why it compiles without
# optimisation (-O0): a third of the time of a Release build, and the same answer to "does clang accept it".
#
# It uses libstdc++, which Debian's LibTorch is built against, and GCC's OpenMP runtime, libgomp, which LibTorch
# already loads: a process must hold one OpenMP runtime, never libgomp and LLVM's libomp side by side. Clang
# generates OpenMP code only for libomp, so with -fopenmp=libgomp it links libgomp and leaves `#pragma omp`
# loops serial in this build (the tools it builds are compile checks, not the ones the tests run).
#
#   scripts/build_clang.sh            configure and build; CLANG_CXX / CLANG_CC choose the compiler (clang++ / clang)
# Jobs: PROBEKIT_CLANG_JOBS (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CLANG_CXX:-clang++}
cc=${CLANG_CC:-clang}
if ! command -v "$cxx" > /dev/null; then
  echo "$cxx not found: run scripts/setup.sh (it installs Debian's clang), or set CLANG_CXX and CLANG_CC" >&2
  exit 2
fi
libgomp=$(g++ -print-file-name=libgomp.so)
launcher=()
if command -v ccache > /dev/null && [ -z "${CCACHE_DISABLE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# FindOpenMP is given the flags and the library outright: its own probe needs _OPENMP, which clang defines only
# for libomp. -pedantic-errors refuses GNU extensions in our code (LibTorch's and the other libraries' headers are
# system headers, exempt).
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O0 -DCMAKE_C_FLAGS_RELEASE=-O0 -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  "${launcher[@]}" -DPROBEKIT_BUILD_TESTS=OFF -DCMAKE_CXX_FLAGS=-pedantic-errors \
  -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp -DOpenMP_gomp_LIBRARY="$libgomp" \
  ${PROBEKIT_CMAKE_ARGS:-} > build-clang.configure.log || { cat build-clang.configure.log; exit 1; }
rm -f build-clang.configure.log
cmake --build build-clang -j "${PROBEKIT_CLANG_JOBS:-$(getconf _NPROCESSORS_ONLN)}" --target probekit_tools
