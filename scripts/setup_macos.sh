#!/usr/bin/env bash
# macOS (Apple Silicon) set-up, run by scripts/setup.sh on macOS: installs with Homebrew what is missing, then
# configures and builds in build/ (Release) with AppleClang. Idempotent like the Debian path. Written from
# Homebrew's, PyTorch's and CMake's documentation; it has not run on a Mac yet (docs/macos.md).
#
#   scripts/setup_macos.sh             install what is missing, configure, build
#   scripts/setup_macos.sh --dry-run   print the packages and the CMake hints, change nothing (any system)
#
# LibTorch (PROBEKIT_LIBTORCH):
#   homebrew (default)  Homebrew's `pytorch` formula, built with USE_MPS=ON and linked against Homebrew's libomp,
#                       the OpenMP runtime the rest of the build uses: one runtime in the process.
#   pip                 the torch of `python3` (a pip install, e.g. in a venv; PROBEKIT_PYTHON names another
#                       interpreter), found through torch.utils.cmake_prefix_path. Its wheel ships its own
#                       libomp.dylib, which is then the one linked: Homebrew's libomp serves only its omp.h header.
# Both LibTorch builds carry fmt headers newer than the ones Homebrew's spdlog was built against, so Homebrew's fmt
# goes first on the include path (FMT_FIRST, as the GPU build does).
set -euo pipefail
cd "$(dirname "$0")/.."

dry_run=0
[ "${1:-}" = --dry-run ] && dry_run=1
libtorch=${PROBEKIT_LIBTORCH:-homebrew}
python=${PROBEKIT_PYTHON:-python3}
case "$libtorch" in
  homebrew | pip) ;;
  *) echo "PROBEKIT_LIBTORCH=$libtorch: expected homebrew or pip" >&2; exit 2 ;;
esac

# Homebrew's formulae for what Debian's packages give (scripts/setup.sh): the build tools, the libraries, and for
# probe_server and the tests cpp-httplib (header-only here), and for the tests node (npm, for
# scripts/fetch_tokenizers.sh and scripts/setup_npm_tests.sh).
packages=(cmake ninja hdf5 cli11 spdlog fmt doctest nlohmann-json pcre2 utf8proc simdjson libomp cpp-httplib node)
[ "$libtorch" = homebrew ] && packages+=(pytorch)

# Homebrew's prefix: /opt/homebrew on Apple Silicon (what a dry run without Homebrew assumes).
if command -v brew > /dev/null; then
  brew_prefix=$(brew --prefix)
else
  brew_prefix=/opt/homebrew
fi
# A formula's own prefix: keg-only formulae (libomp) are not linked into the main prefix.
formula_prefix() { echo "$brew_prefix/opt/$1"; }

# Where LibTorch's CMake files and, for a pip torch, its libomp are.
if [ "$libtorch" = homebrew ]; then
  torch_prefix="$(formula_prefix pytorch)/share/cmake"
  openmp_library="$(formula_prefix libomp)/lib/libomp.dylib"
else
  if ! torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2> /dev/null); then
    echo "PROBEKIT_LIBTORCH=pip: $python cannot import torch; install it (python3 -m pip install torch) or name" \
      "the interpreter that has it with PROBEKIT_PYTHON" >&2
    exit 1
  fi
  # cmake_prefix_path is <site-packages>/torch/share/cmake; the wheel's libomp is in <site-packages>/torch/lib.
  openmp_library="$(dirname "$(dirname "$torch_prefix")")/lib/libomp.dylib"
fi

# AppleClang has no OpenMP runtime of its own: FindOpenMP is given libomp's flags, header and library outright.
hints=(
  "-DCMAKE_PREFIX_PATH=$torch_prefix;$brew_prefix"
  "-DOpenMP_CXX_FLAGS=-Xpreprocessor -fopenmp -I$(formula_prefix libomp)/include"
  "-DOpenMP_CXX_LIB_NAMES=omp"
  "-DOpenMP_omp_LIBRARY=$openmp_library"
  "-DFMT_FIRST=$(formula_prefix fmt)/include"
  "-DHDF5_ROOT=$(formula_prefix hdf5)"
)

if ((dry_run)); then
  echo "platform: macos"
  echo "libtorch: $libtorch ($torch_prefix)"
  echo "brew install: ${packages[*]}"
  echo "cmake hints:"
  printf '  %s\n' "${hints[@]}"
  exit 0
fi

if ! command -v brew > /dev/null; then
  echo "Homebrew is needed (https://brew.sh), then run this again" >&2
  exit 1
fi
if ! xcode-select -p > /dev/null 2>&1; then
  echo "AppleClang is needed: run xcode-select --install, then run this again" >&2
  exit 1
fi
missing=()
for package in "${packages[@]}"; do
  brew list --formula --versions "$package" > /dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "Installing: ${missing[*]}"
  brew install "${missing[@]}"
fi
if [ ! -e "$openmp_library" ]; then
  echo "$openmp_library is missing: the torch found ($torch_prefix) ships no libomp" >&2
  exit 1
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${hints[@]}" ${PROBEKIT_CMAKE_ARGS:-}
cmake --build build
