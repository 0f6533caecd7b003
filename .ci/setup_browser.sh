#!/usr/bin/env bash
# Make the browser tier (tests/review/test_browser.py) runnable: Debian's chromium and chromium-driver.
# selenium itself comes with the `test` extra (scripts/setup_venv.sh). Idempotent: it installs only what
# is missing. It never fails the run: where nothing can be installed it says why and exits 0, and the
# browser-marked tests then skip with the reason.
set -u
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=$(command -v sudo || true)
say() { echo "setup_browser: $*"; }

missing=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  say "no apt-get here; install ${missing[*]} yourself, or the browser tests skip"; exit 0
fi
say "installing ${missing[*]}"
{ $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    $SUDO apt-get install -o DPkg::Lock::Timeout=300 -y -qq "${missing[@]}"; } \
  || say "could not install ${missing[*]} (browser tests will skip)"
exit 0
