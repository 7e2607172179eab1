#!/usr/bin/env bash
# Builds the project with AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/ (-DPROBEKIT_SANITIZE=ON,
# the same compiler as the normal build) and runs the test suite there; the tools the tests start are
# sanitized too. Run scripts/setup.sh first (packages) and scripts/fetch_tokenizers.sh (golden tests).
#
#   scripts/sanitize.sh          the whole suite
#   scripts/sanitize.sh core     test_core only: the torch-free code (tokenizer, file formats, datasets,
#                                metrics), which builds in minutes
set -euo pipefail
cd "$(dirname "$0")/.."
scope=${1:-all}

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
# RelWithDebInfo's -O2 -g (a LibTorch file: 13 s against 29 s of CPU, 6 MB against 14 MB). -O0 builds a little faster
# but runs the suite 70 s slower (9.3 against 8.1 minutes). The benchmarks are not built: they measure, and the
# normal build's suite already runs the one that is a test (a minute of the build).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROBEKIT_SANITIZE=ON -DPROBEKIT_BUILD_BENCHMARKS=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" ${PROBEKIT_CMAKE_ARGS:-}
cd build-asan
if [ "$scope" = core ]; then
  cmake --build . --target test_core
  ./tests/test_core
else
  cmake --build .
  ctest --output-on-failure --timeout 1800 -j "$(getconf _NPROCESSORS_ONLN)"
fi
