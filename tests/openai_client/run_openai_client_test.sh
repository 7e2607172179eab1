#!/usr/bin/env bash
# The test of probe_server's OpenAI endpoints with the official openai client: trains probes on a fixture model
# with the built tools, then runs openai_client_test.mjs (the client installed by scripts/setup_openai_client_test.sh).
#
#   tests/openai_client/run_openai_client_test.sh TOOLS_DIR MODEL_DIR
set -euo pipefail
tools=$1 model=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/openai" ]; then
  echo "the openai client is not installed: run bash scripts/setup_openai_client_test.sh" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/probekit-openai-XXXXXX")
trap 'rm -rf "$work"' EXIT

# Three of the reference's actions, each text its label's cue (as tests/test_util.h writes them).
labels=(analyzing reframing noticing)
cues=("I examined each part of the problem step by step." "Instead of a setback, I saw it as a chance to learn."
      "Suddenly I noticed the small crack in the window.")
for i in $(seq 0 59); do
  printf '{"text": "%s Day %d.", "cognitive_action": "%s"}\n' "${cues[i % 3]}" "$i" "${labels[i % 3]}"
done > "$work/data.jsonl"
"$tools/capture_activations" --model "$model" --dataset "$work/data.jsonl" --output-dir "$work/act" --layers 2,5 \
  --device cpu --quiet
"$tools/train_binary_probes" --activations "$work/act" --output-dir "$work/probes" --epochs 10 --device cpu --quiet
node "$here/openai_client_test.mjs" "$tools/probe_server" "$work/probes"
