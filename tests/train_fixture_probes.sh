#!/usr/bin/env bash
# Probes for the tests that drive probe_server from JavaScript: three of the reference's actions, each text its
# label's cue (as tests/test_util.h writes them), captured from a fixture model and trained with the built tools
# into WORK_DIR/probes.
#
#   tests/train_fixture_probes.sh TOOLS_DIR MODEL_DIR WORK_DIR
set -euo pipefail
tools=$1 model=$2 work=$3
labels=(analyzing reframing noticing)
cues=("I examined each part of the problem step by step." "Instead of a setback, I saw it as a chance to learn."
      "Suddenly I noticed the small crack in the window.")
for i in $(seq 0 59); do
  printf '{"text": "%s Day %d.", "cognitive_action": "%s"}\n' "${cues[i % 3]}" "$i" "${labels[i % 3]}"
done > "$work/data.jsonl"
"$tools/capture_activations" --model "$model" --dataset "$work/data.jsonl" --output-dir "$work/act" --layers 2,5 \
  --device cpu --quiet
"$tools/train_binary_probes" --activations "$work/act" --output-dir "$work/probes" --epochs 10 --device cpu --quiet
