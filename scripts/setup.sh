#!/usr/bin/env bash
# Installs the Debian packages the tools need (only the missing ones), then configures build/ (Release) and builds
# the tools; the test command (scripts/test.sh) adds what the tests need and builds the rest. Idempotent: a second
# run installs nothing and rebuilds only what changed. On macOS it runs scripts/setup_macos.sh (Homebrew) instead.
#
#   scripts/setup.sh                              install what is missing, build the tools
#   scripts/setup.sh --python                     the same, and the Python package's extension module (pybind11,
#                                                 python3-torch)
#   scripts/setup.sh --dry-run [--platform P]     print what it would install (and on macOS the CMake hints),
#                                                 change nothing; P: debian or macos (default: this system).
#                                                 PROBEKIT_SETUP_DRY_RUN=P does the same.
set -euo pipefail
cd "$(dirname "$0")/.."

platform=$([ "$(uname -s)" = Darwin ] && echo macos || echo debian)
dry_run=${PROBEKIT_SETUP_DRY_RUN:-}
python_module=OFF
while (($#)); do
  case "$1" in
    --dry-run) dry_run=${dry_run:-$platform} ;;
    --python) python_module=ON ;;
    --platform) platform=${2:?--platform needs macos or debian}; [ -n "$dry_run" ] && dry_run=$platform; shift ;;
    *) echo "unknown argument $1 (expected --python, --dry-run [--platform macos|debian])" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$dry_run" ] && platform=$dry_run
case "$platform" in
  macos) exec bash scripts/setup_macos.sh ${dry_run:+--dry-run} ;;
  debian) ;;
  *) echo "unknown platform $platform (expected macos or debian)" >&2; exit 2 ;;
esac

packages=(
  g++ cmake ninja-build git ca-certificates python3
  libtorch-dev libopenblas0-openmp   # OpenBLAS with OpenMP: LibTorch's matrix products are ~30x slower without it
  libhdf5-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev libsimdjson-dev
  libcurl4-openssl-dev libcpp-httplib-dev   # the hub client downloads with libcurl; probe_server serves HTTP with httplib
)
if [ "$python_module" = ON ]; then
  # The Python package (python/, `pip install --no-build-isolation .`): its extension module is built with Debian's
  # pybind11 against python3-torch (which reuses libtorch-dev's libtorch1.13).
  packages+=(python3-dev pybind11-dev python3-pybind11 python3-torch python3-venv python3-pip python3-setuptools python3-wheel)
fi
if [ -n "$dry_run" ]; then
  echo "platform: debian"
  echo "apt-get install: ${packages[*]}"
  exit 0
fi
bash scripts/install_missing.sh "${packages[@]}"

# The Python extension module is built beside the tools (so `pip install .` reuses build/) for the python3 that has
# torch: the first on PATH, else Debian's own, which a pyenv or venv on PATH may hide. The objects are position-
# independent whether or not the module is built, so that the test command's build reuses the tools'. A first
# configure leaves out the test suite, the benchmarks and the module (scripts/test.sh turns them on); a later one
# keeps what is configured.
python=/usr/bin/python3
if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then python=$(command -v python3); fi
# A first configure also makes it a unity build: each library's files compile eight to a translation unit, which
# parses the headers and generates their inline code (LibTorch's, nlohmann/json's, fmt's) once per eight files,
# not once per file: a fresh build in about half the time. A folder's files therefore keep distinct names in their
# anonymous namespaces. A build directory configured otherwise keeps its setting.
options=()
[ -f build/CMakeCache.txt ] || options=(-DPROBEKIT_BUILD_TESTS=OFF -DPROBEKIT_BUILD_BENCHMARKS=OFF -DPROBEKIT_BUILD_PYTHON=OFF
                                        -DCMAKE_UNITY_BUILD=ON)
[ "$python_module" = ON ] && options+=(-DPROBEKIT_BUILD_PYTHON=ON)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON "${options[@]}" \
  -DPython3_EXECUTABLE="$python" ${PROBEKIT_CMAKE_ARGS:-}
targets=(--target probekit_tools)
[ "$python_module" = ON ] && targets+=(--target _native)
cmake --build build "${targets[@]}"
