#!/usr/bin/env bash
# The browser test of probe_server's page: trains probes on a fixture model with the built tools, then runs
# page_test.mjs (headless Chromium through puppeteer-core, installed by scripts/setup_browser_test.sh).
#
#   tests/browser/run_page_test.sh TOOLS_DIR MODEL_DIR SCREENSHOT.png
set -euo pipefail
tools=$1 model=$2 screenshot=$3
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/puppeteer-core" ]; then
  echo "puppeteer-core is not installed: run bash scripts/setup_browser_test.sh" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/probekit-browser-XXXXXX")
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
mkdir -p "$(dirname "$screenshot")"
node "$here/page_test.mjs" "$tools/probe_server" "$work/probes" "$screenshot"
