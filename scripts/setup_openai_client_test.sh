#!/usr/bin/env bash
# Installs what the test of probe_server's OpenAI endpoints needs: the official openai client from npm, at the
# version in tests/openai_client/package-lock.json, into tests/openai_client/node_modules. Skips the install when
# it is already there.
set -euo pipefail
cd "$(dirname "$0")/../tests/openai_client"
if ! command -v npm >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm
fi
# node_modules/.probekit-lock is the lock file of the last install: another lock file means install again.
if ! cmp -s package-lock.json node_modules/.probekit-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.probekit-lock
fi
