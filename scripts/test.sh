#!/usr/bin/env bash
# The test command: installs what is missing, builds, fetches the real tokenizers and the browser test's
# puppeteer-core, and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch_tokenizers.sh
bash scripts/setup_browser_test.sh   # puppeteer-core for the browser test of probe_server's page
bash scripts/setup_openai_client_test.sh   # the openai npm client for the test of the OpenAI endpoints
cd build
ctest --output-on-failure --timeout 900 -j "$(getconf _NPROCESSORS_ONLN)"
