#!/usr/bin/env bash
# Create .venv and install inferlane into it: `scripts/setup.sh` for running it,
# `scripts/setup.sh test` for the test tools too. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
extras=""
[[ "${1:-}" == "test" ]] && extras="[test]"
# The constraint keeps torch on the CPU build (a newer release would pull CUDA, GBs).
.venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -c constraints-cpu.txt -e ".${extras}"
