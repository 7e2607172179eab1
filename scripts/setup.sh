#!/usr/bin/env bash
# Installs the Debian packages this project needs (only the missing ones), then configures and builds it
# in build/ (Release). Idempotent: a second run installs nothing and rebuilds only what changed. On macOS it
# runs scripts/setup_macos.sh (Homebrew) instead.
#
#   scripts/setup.sh                              install what is missing, build
#   scripts/setup.sh --dry-run [--platform P]     print what it would install (and on macOS the CMake hints),
#                                                 change nothing; P: debian or macos (default: this system).
#                                                 PROBEKIT_SETUP_DRY_RUN=P does the same.
set -euo pipefail
cd "$(dirname "$0")/.."

platform=$([ "$(uname -s)" = Darwin ] && echo macos || echo debian)
dry_run=${PROBEKIT_SETUP_DRY_RUN:-}
while (($#)); do
  case "$1" in
    --dry-run) dry_run=${dry_run:-$platform} ;;
    --platform) platform=${2:?--platform needs macos or debian}; [ -n "$dry_run" ] && dry_run=$platform; shift ;;
    *) echo "unknown argument $1 (expected --dry-run [--platform macos|debian])" >&2; exit 2 ;;
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
  libhdf5-dev libcli11-dev libspdlog-dev doctest-dev nlohmann-json3-dev
  libpcre2-dev libutf8proc-dev libsimdjson-dev
  libcurl4-openssl-dev libcpp-httplib-dev   # the hub client downloads with libcurl; probe_server and the tests' mock hub serve HTTP with httplib
  python3-filelock                          # the tests check our blob locks exclude huggingface_hub's (filelock)
  python3-h5py                              # the tests read merge_activations --virtual files with h5py
  python3-jinja2                            # the chat template tests render with jinja2 as transformers does
  python3-sklearn                           # the logistic and mean-diff probes are checked against sklearn's LogisticRegression
  # The export round trip loads our probes into the reference's PyTorch modules (9 MB download, 47 MB installed,
  # plus libtorch-test's 51 MB and NumPy/SymPy; it reuses libtorch-dev's libtorch1.13).
  python3-torch
  clang  # CI builds the sanitized suite with clang (scripts/sanitize.sh), as macOS builds with AppleClang
  chromium   # the web page's browser test drives headless Chromium through the DevTools protocol (puppeteer-core)
  # The Python package (python/, `pip install --no-build-isolation .`): its extension module is built with Debian's
  # pybind11 against python3-torch; scripts/test.sh installs it into a venv and runs its pytest tests and the
  # quickstart notebook (jupyter-nbconvert with python3-ipykernel; the notebook plots with matplotlib).
  python3-dev pybind11-dev python3-pybind11 python3-venv python3-pip python3-setuptools python3-wheel python3-pytest
  python3-tqdm jupyter-nbconvert python3-ipykernel python3-matplotlib
)
if [ -n "$dry_run" ]; then
  echo "platform: debian"
  echo "apt-get install: ${packages[*]}"
  exit 0
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "Installing: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python extension module is built beside the tools (so `pip install .` reuses build/) for the python3 that has
# torch: the first on PATH, else Debian's own, which a pyenv or venv on PATH may hide.
python=/usr/bin/python3
if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then python=$(command -v python3); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPROBEKIT_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$python" \
  ${PROBEKIT_CMAKE_ARGS:-}
cmake --build build
