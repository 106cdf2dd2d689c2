#!/usr/bin/env bash
# Create .venv and install inferlane into it: `scripts/setup.sh` for running it,
# `scripts/setup.sh test` for the test tools too. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
test_tools=false
[[ "${1:-}" == "test" ]] && test_tools=true
if $test_tools; then
    # The ops tests run promtool and a real Prometheus, headless Chromium and
    # docker-compose (file validation): Debian packages, installed when missing.
    need=()
    for bin in prometheus:prometheus promtool:prometheus chromium:chromium \
               docker-compose:docker-compose; do
        command -v "${bin%%:*}" >/dev/null || need+=("${bin##*:}")
    done
    if ((${#need[@]})) && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
    fi
fi
python3 -m venv .venv
extras=""
$test_tools && extras="[test]"
# The constraint keeps torch on the CPU build (a newer release would pull CUDA, GBs).
.venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -c constraints-cpu.txt -e ".${extras}"
