#!/usr/bin/env bash
# Installs from npm what the tests that drive probe_server with JavaScript clients need, each at the versions of its
# folder's package-lock.json, into that folder's node_modules: tests/browser (puppeteer-core, for the web page's test
# in Debian's chromium) and tests/openai_client (the official openai client, for the OpenAI endpoints' test).
# Skips a folder whose install is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null 2>&1 || bash scripts/install_missing.sh npm
for folder in tests/browser tests/openai_client; do
  # node_modules/.probekit-lock is the lock file of the last install: another lock file means install again.
  if ! cmp -s "$folder/package-lock.json" "$folder/node_modules/.probekit-lock"; then
    (cd "$folder" && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.probekit-lock)
  fi
done
