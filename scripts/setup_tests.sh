#!/usr/bin/env bash
# Installs the Debian packages that only the tests need (only the missing ones), on top of scripts/setup.sh's; the
# test command (scripts/test.sh) runs it. The main job (scripts/run_example.sh) never does.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)" = Darwin ]; then
  exit 0  # scripts/setup_macos.sh (run by scripts/setup.sh) installs what the tests need there
fi
packages=(
  doctest-dev
  python3-filelock   # the tests check our blob locks exclude huggingface_hub's (filelock)
  python3-h5py       # the tests read merge_activations --virtual files with h5py
  python3-jinja2     # the chat template tests render with jinja2 as transformers does
  python3-sklearn    # the logistic and mean-diff probes are checked against sklearn's LogisticRegression
  # The export round trip loads our probes into the reference's PyTorch modules (python3-torch, as the Python package).
  clang  # CI builds the sanitized suite with clang (scripts/sanitize.sh), as macOS builds with AppleClang
  chromium   # the web page's browser test drives headless Chromium through the DevTools protocol (puppeteer-core)
  # The Python package's pytest tests and its quickstart notebook (jupyter-nbconvert with python3-ipykernel; the
  # notebook plots with matplotlib).
  python3-pytest python3-tqdm jupyter-nbconvert python3-ipykernel python3-matplotlib
)
bash scripts/install_missing.sh "${packages[@]}"
