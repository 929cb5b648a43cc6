#!/usr/bin/env bash
# Set up the test environment on a fresh Debian machine: the system packages of
# tests/apt-packages.txt (needs root or sudo; skipped with a note otherwise) and the
# Python packages of requirements-dev.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=$(sed -e 's/#.*//' tests/apt-packages.txt | xargs)
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done | xargs)
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else sudo=none; fi
  if [ "$sudo" = none ]; then
    echo "tests/setup.sh: cannot install $missing (not root, no sudo); the tests that need them will skip" >&2
  else
    echo "tests/setup.sh: installing Debian packages: $missing"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
fi
python3 -m pip install -q -r requirements-dev.txt
