#!/usr/bin/env bash
# The test of probe_server's OpenAI endpoints with the official openai client: trains probes on a fixture model
# with the built tools, then runs openai_client_test.mjs (the client installed by scripts/setup_npm_tests.sh).
#
#   tests/openai_client/run_openai_client_test.sh TOOLS_DIR MODEL_DIR
set -euo pipefail
tools=$1 model=$2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/node_modules/openai" ]; then
  echo "the openai client is not installed: run bash scripts/setup_npm_tests.sh" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/probekit-openai-XXXXXX")
trap 'rm -rf "$work"' EXIT

bash "$here/../train_fixture_probes.sh" "$tools" "$model" "$work"
node "$here/openai_client_test.mjs" "$tools/probe_server" "$work/probes"
