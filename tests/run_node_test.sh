#!/usr/bin/env bash
# Runs one of probe_server's Node tests (the browser page, the openai client): trains probes on a fixture model with
# the built tools, then runs the test's script with probe_server, the probes and any further arguments. The npm
# package it needs is installed beside the script by scripts/setup_npm_tests.sh.
#
#   tests/run_node_test.sh TEST.mjs NPM_PACKAGE TOOLS_DIR MODEL_DIR [ARGUMENTS...]
set -euo pipefail
script=$1 package=$2 tools=$3 model=$4
shift 4
if [ ! -d "$(dirname "$script")/node_modules/$package" ]; then
  echo "$package is not installed: run bash scripts/setup_npm_tests.sh" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/probekit-node-test-XXXXXX")
trap 'rm -rf "$work"' EXIT

bash "$(dirname "$0")/train_fixture_probes.sh" "$tools" "$model" "$work"
node "$script" "$tools/probe_server" "$work/probes" "$@"
