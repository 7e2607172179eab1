#!/usr/bin/env bash
# The test command: installs what is missing (the tools' and the Python package's packages: scripts/setup.sh --python;
# then the tests' own: scripts/setup_tests.sh), builds everything (the tools, the suite, the benchmarks, the Python
# module), fetches the real tokenizers and, from npm, the browser test's puppeteer-core and the openai client, installs
# the Python package into build/venv (a virtual environment with the system's site packages: Debian's torch, pytest,
# jupyter), and runs the whole suite, the package's pytest tests and the quickstart notebook included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --python
bash scripts/setup_tests.sh
cmake -S . -B build -DPROBEKIT_BUILD_TESTS=ON -DPROBEKIT_BUILD_BENCHMARKS=ON
cmake --build build
bash scripts/fetch_tokenizers.sh
bash scripts/setup_npm_tests.sh   # puppeteer-core (the page's browser test) and the openai client, from npm
python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' build/CMakeCache.txt)
"$python" -m venv --system-site-packages --clear build/venv
# pip reuses build/ (setup.py builds only the extension module there, already built by setup.sh); the kernel spec
# makes the notebook's kernel the venv's Python.
build/venv/bin/python -m pip install --quiet --no-build-isolation --no-index .
build/venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
cd build
ctest --output-on-failure --timeout 900 -j "$(getconf _NPROCESSORS_ONLN)"
