#!/usr/bin/env bash
# The capture benchmark (PROTOCOL.md section 1: the Gemma-3-4B-shaped model, 4,500 texts, layers 8/17/25/33)
# of two builds side by side in one sitting on the GPU machine, runs alternating: the working tree (built
# into /tmp/build) and an earlier source tree carried beside it (e.g. `git archive COMMIT | tar -x -C .before`
# in an ignored folder), built into /tmp/build_before with the same dependencies. For "before and after" figures
# of a change to the forward pass.
# Usage: bash bench/compare_capture.sh OUT BEFORE_SRC [RUNS]   (after bench/gpu_benchmarks.sh OUT build model)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?output directory}
before=${2:?source tree of the earlier build}
runs=${3:-2}
mkdir -p "$out"
export LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu:/tmp/deps/usr/lib/x86_64-linux-gnu/hdf5/serial:${LD_LIBRARY_PATH:-}"
PROBEKIT_SOURCE="$before" PROBEKIT_BUILD=/tmp/build_before bash scripts/gpu/build.sh capture_activations > /dev/null
for run in $(seq "$runs"); do
  for side in before after; do
    tools=/tmp/build/tools
    [ "$side" = before ] && tools=/tmp/build_before/tools
    "$tools/capture_activations" --model /tmp/bench_model --dataset /tmp/bench_dataset.jsonl --layers 8,17,25,33 \
      --output-dir "/tmp/compare_$side" --overwrite --json -q > "$out/capture_${side}_$run.json"
    echo "$side run $run: $(grep -h examples_per_second "$out/capture_${side}_$run.json")"
  done
done
