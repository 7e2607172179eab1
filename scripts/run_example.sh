#!/usr/bin/env bash
# The main job on the built-in example: installs what is missing and builds (scripts/setup.sh), then
#   1. writes a small random-weight checkpoint (no real weights can be downloaded here; see README.md to use
#      a real one: PROBEKIT_MODEL=/path/to/gemma-3-4b-it or =google/gemma-3-4b-it bash scripts/run_example.sh),
#   2. captures activations of data/example.jsonl (320 labelled texts, 8 labels),
#   3. trains one-vs-rest probes on every captured layer (report: data/generated/probes/report.html),
#   4. ranks the labels a new text shows.
# Idempotent: what exists is reused (the capture resumes or is already complete; training is rerun).
set -euo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."
bash scripts/setup.sh
tools=build/tools
out=data/generated
model=$out/example_model
if [ -n "${PROBEKIT_MODEL:-}" ]; then
  model=$PROBEKIT_MODEL
  # A folder named from where the command ran, not from the repository (else it would be read as a hub name).
  if [ "${model#/}" = "$model" ] && [ -d "$caller/$model" ]; then model=$caller/$model; fi
  # Each model's run in a folder of its own: one capture folder resumed with another model is refused.
  out=$out/models/$(printf '%s' "$PROBEKIT_MODEL" | tr -c 'A-Za-z0-9._-' '_')
elif [ ! -s "$model/model.safetensors" ]; then
  "$tools/make_example" model --output "$model" --tokenizer data/example_tokenizer.json
fi
start=$(date +%s)
"$tools/capture_activations" --model "$model" --dataset data/example.jsonl --output-dir "$out/activations" --resume
"$tools/train_binary_probes" --activations "$out/activations" --output-dir "$out/probes" --overwrite
"$tools/multi_probe_inference" --probes-dir "$out/probes" --model "$model" --best-layer \
  --text "Instead of seeing the rejection as a failure, I started to see it as useful feedback about what to change."
echo "Done in $(( $(date +%s) - start )) s. Probe report: $out/probes/report.html"
