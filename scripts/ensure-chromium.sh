#!/usr/bin/env bash
# The report tests open the page in Debian's chromium (driven by Playwright, which downloads no browser).
# Idempotent: installs chromium when /usr/bin/chromium is absent and we are root; else says how.
set -euo pipefail
CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing chromium (Debian package) for the report tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    exit 0
fi
echo "the report tests need $CHROMIUM: run 'sudo apt-get install -y chromium' (Debian/Ubuntu)" >&2
exit 1
