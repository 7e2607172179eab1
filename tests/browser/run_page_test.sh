#!/usr/bin/env bash
# The browser test of probe_server's page: trains probes on a fixture model with the built tools, then runs
# page_test.mjs (headless Chromium through puppeteer-core, installed by scripts/setup_npm_tests.sh).
#
#   tests/browser/run_page_test.sh TOOLS_DIR MODEL_DIR SCREENSHOT.png
set -euo pipefail
tools=$1 model=$2 screenshot=$3
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/puppeteer-core" ]; then
  echo "puppeteer-core is not installed: run bash scripts/setup_npm_tests.sh" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/probekit-browser-XXXXXX")
trap 'rm -rf "$work"' EXIT

bash "$here/../train_fixture_probes.sh" "$tools" "$model" "$work"
mkdir -p "$(dirname "$screenshot")"
node "$here/page_test.mjs" "$tools/probe_server" "$work/probes" "$screenshot"
