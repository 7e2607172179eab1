#!/usr/bin/env bash
# The correctness checks that need the GPU machine, after scripts/gpu/build.sh: the CUDA tests (device layer,
# bf16/fp32 parity), the probe checks (scripts/gpu_probe_checks.sh: CUDA training, the reference's modules
# loading our files, scikit-learn's values), the conversion of the reference's pickled probes, and the CPU
# suites built against LibTorch 2.x. Usage: bash scripts/gpu/checks.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?output directory}
mkdir -p "$out"
python=$(command -v python3)
[ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3
export PATH="$(dirname "$python"):$PATH"
export LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu:/tmp/deps/usr/lib/x86_64-linux-gnu/hdf5/serial:${LD_LIBRARY_PATH:-}"
export OMP_WAIT_POLICY=PASSIVE
build=/tmp/build

echo "== CUDA tests"
(cd $build/tests && ./test_gpu) > "$out/test_gpu.txt" 2>&1; echo "exit $?"
grep -E "MESSAGE|ERROR|test cases|assertions" -A1 "$out/test_gpu.txt" | grep -v "^--" | grep -v "^$"

echo "== probe checks"
bash scripts/gpu_probe_checks.sh $build "$out/probes" > "$out/probe_checks.txt" 2>&1; echo "exit $?"
tail -25 "$out/probe_checks.txt"

echo "== reference pickles converted and scored"
ref=/tmp/reference_probes
rm -rf $ref && mkdir -p $ref
"$python" - "$ref" <<'PY'
import sys, torch
for i, label in enumerate(["analyzing", "reframing"]):
    g = torch.Generator().manual_seed(i)
    sd = {"linear.weight": torch.randn(1, 64, generator=g).bfloat16(), "linear.bias": torch.randn(1, generator=g).bfloat16()}
    torch.save({"model_state_dict": sd, "model_class": "BinaryLinearProbe", "model_config": {"input_dim": 64},
                "metadata": {"action": label, "epoch": 3, "val_auc": 0.9}}, f"{sys.argv[1]}/probe_{label}.pth")
PY
"$python" scripts/convert_reference_probes.py $ref --layer 5 && \
  $build/tools/multi_probe_inference --probes-dir $ref --model tests/fixtures/models/gemma3_text --text "I looked again." \
    --device cpu --json -q > "$out/converted_inference.json" 2>&1; echo "exit $?"; cat "$out/converted_inference.json"

echo "== CPU suites against this LibTorch (the real tokenizers' cache is not carried here, nor Chromium for the page test)"
(cd $build && MKL_DYNAMIC=FALSE ctest -j 12 --timeout 600 -E "real|browser_page_test" --output-on-failure) > "$out/ctest.txt" 2>&1
echo "exit $?"
tail -15 "$out/ctest.txt"
