#!/usr/bin/env bash
# The test command: installs what is missing, builds, fetches the real tokenizers and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch_tokenizers.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(getconf _NPROCESSORS_ONLN)"
