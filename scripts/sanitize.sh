#!/usr/bin/env bash
# Builds the project with clang, AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/
# (-DPROBEKIT_SANITIZE=ON) and runs the test suite there; the tools the tests start are sanitized too. Run
# scripts/test.sh first (the packages, clang among them, and the real tokenizers of the golden tests).
#
#   scripts/sanitize.sh          the whole suite
#   scripts/sanitize.sh core     test_core only: the torch-free code (tokenizer, file formats, datasets,
#                                metrics), which builds in minutes
# CLANG_CXX / CLANG_CC choose the compiler (clang++ / clang).
#
# This build is also the check that the code is not tied to GCC, as macOS's AppleClang needs (docs/macos.md; CI
# runs `core`, the whole build by hand):
# -pedantic-errors refuses GNU extensions in our code (LibTorch's and the other libraries' headers are system
# headers, exempt). It uses libstdc++, which Debian's LibTorch is built against, and GCC's OpenMP runtime, libgomp,
# which LibTorch already loads: a process must hold one OpenMP runtime, never libgomp and LLVM's libomp side by
# side. Clang generates OpenMP code only for libomp, so with -fopenmp=libgomp it links libgomp and runs our
# `#pragma omp` loops serially here (the GCC build the test command makes runs them in parallel). FindOpenMP is
# given the flags and the library outright: its own probe needs _OPENMP, which clang defines only for libomp.
set -euo pipefail
cd "$(dirname "$0")/.."
scope=${1:-all}
cxx=${CLANG_CXX:-clang++}
cc=${CLANG_CC:-clang}
if ! command -v "$cxx" > /dev/null; then
  echo "$cxx not found: run scripts/setup_tests.sh (it installs Debian's clang), or set CLANG_CXX and CLANG_CC" >&2
  exit 2
fi
libgomp=$(g++ -print-file-name=libgomp.so)

# LibTorch, OpenBLAS and libgomp are not instrumented; what the sanitizers need to know about them:
# - A sanitizer failure must not look like a tool's own exit codes (1 error, 2 usage), which the tests check:
#   ASan exits 86 and UBSan 87 instead of 1.
# - LeakSanitizer reports the allocations LibTorch, OpenBLAS and libgomp keep for the whole process (thread
#   pools, allocator caches, operator registries) and never free; scripts/lsan.supp suppresses leaks whose
#   stacks go through those libraries only, so a leak in our code is still reported.
# - Symbolized stacks name the line of a finding.
export ASAN_OPTIONS="exitcode=86:abort_on_error=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="exitcode=87:print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# -O1 -g1 (line tables): what a symbolized stack needs, and under half the compile time and object size of
# RelWithDebInfo's -O2 -g. -O0 builds a little faster but runs the suite 70 s slower. The benchmarks are not
# built: they measure, and the normal build's suite already runs the one that is a test (a minute of the build).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROBEKIT_SANITIZE=ON -DPROBEKIT_BUILD_BENCHMARKS=OFF \
  -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS=-pedantic-errors \
  -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp -DOpenMP_gomp_LIBRARY="$libgomp" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" ${PROBEKIT_CMAKE_ARGS:-}
cd build-asan
if [ "$scope" = core ]; then
  cmake --build . --target test_core
  ./tests/test_core
else
  cmake --build .
  ctest --output-on-failure --timeout 1800 -j "$(getconf _NPROCESSORS_ONLN)"
fi
