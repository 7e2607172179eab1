#!/usr/bin/env bash
# Runs the numeric tests (ctest label `numeric`: the model against transformers, batched against alone, the probes'
# solvers against scikit-learn, the Python package against the tools) once more under an OpenBLAS kernel other than
# the one this machine runs (OPENBLAS_CORETYPE), so that a result depending on the kernel fails here and not first on
# someone else's CPU (docs/probe_server.md#batching). Needs build/ from scripts/test.sh. x86-64 with AVX2 and FMA only
# (the kernels named are x86's); elsewhere it says so and runs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
  echo "numeric tests under a second OpenBLAS kernel: skipped (x86-64 with AVX2 and FMA only)"
  exit 0
fi
# The kernel OpenBLAS picks here: the variable's, else its own choice for this CPU.
own=$(python3 -c 'import ctypes
blas = ctypes.CDLL("libopenblas.so.0")
blas.openblas_get_corename.restype = ctypes.c_char_p
print(blas.openblas_get_corename().decode())' 2>/dev/null || echo "${OPENBLAS_CORETYPE:-unknown}")
case "${own,,}" in
  sandybridge) other=Haswell ;;
  *) other=SandyBridge ;;
esac
echo "numeric tests under OpenBLAS's $other kernel (this machine runs $own)"
cd build
OPENBLAS_CORETYPE=$other ctest -L numeric --no-tests=error --output-on-failure --timeout 900 -j "$(getconf _NPROCESSORS_ONLN)"
