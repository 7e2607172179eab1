#!/usr/bin/env bash
# Run on the GPU machine (Ubuntu, CUDA, torch 2.x in a Python venv): unpacks the carried .debs into /tmp/deps
# and builds against torch's own LibTorch into /tmp/build (or $PROBEKIT_BUILD, from the sources in
# $PROBEKIT_SOURCE: an earlier tree to compare with). Prints the environment to source for running.
# Usage: bash scripts/gpu/build.sh [cmake targets...]
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=/tmp/deps
if [ ! -e "$deps/usr/include/pybind11/pybind11.h" ]; then  # the last package added: a tree unpacked earlier lacks it
  mkdir -p "$deps"
  for f in .gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
  # Debian's HDF5 include directory is an absolute symlink into /usr; point it inside the unpacked tree.
  ln -sfn "$deps/usr/include/hdf5/serial" "$deps/usr/lib/x86_64-linux-gnu/hdf5/serial/include"
fi
# Debian's libz.so points at Debian's own zlib by an absolute path the host lacks; the linker would then take the
# static libz.a, which a shared object (the Python module) cannot hold. The host's zlib has the same interface.
host_zlib=$(readlink -f /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null || true)
[ -n "$host_zlib" ] && [ -e "$host_zlib" ] && ln -sfn "$host_zlib" "$deps/usr/lib/x86_64-linux-gnu/libz.so"
python=$(command -v python3)
[ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
export PATH="$(dirname "$python"):$PATH"
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/hdf5/serial:${LD_LIBRARY_PATH:-}"
source=${PROBEKIT_SOURCE:-.}
build=${PROBEKIT_BUILD:-/tmp/build}
cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" \
  -DHDF5_ROOT="$deps/usr/lib/x86_64-linux-gnu/hdf5/serial" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DFMT_FIRST="$deps/usr/include" ${PROBEKIT_CMAKE_ARGS:-} >/tmp/cmake.log 2>&1 || { tail -40 /tmp/cmake.log; exit 1; }
cmake --build "$build" ${1:+--target "$@"} > /tmp/build.log 2>&1 || { grep -B2 -A12 -m3 "error" /tmp/build.log; exit 1; }
tail -2 /tmp/build.log
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
