#!/usr/bin/env bash
# Installs those of the Debian packages named that are not installed yet (apt-get, as root or through sudo), saying
# which; installs nothing when all are there. Used by scripts/setup.sh and scripts/setup_tests.sh.
#
#   scripts/install_missing.sh PACKAGE...
set -euo pipefail
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "Installing: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
