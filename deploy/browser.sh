#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the console's browser test
# (tests/e2e/test_console_browser.py), from Debian's packages `chromium` and `chromium-driver`
# (nothing downloads a browser build of its own):
#
#   deploy/browser.sh install    apt-get install them when missing (as root; idempotent, ~0 s when present)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"

case "${1:-}" in
    install)
        if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then exit 0; fi
        can_apt || die "chromium and chromedriver are missing: install Debian's chromium and chromium-driver (as root: apt-get install -y chromium chromium-driver)."
        apt_install chromium chromium-driver
        ;;
    *) echo "usage: $0 install" >&2; exit 2 ;;
esac
