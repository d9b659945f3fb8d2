#!/usr/bin/env bash
# Installs Debian's headless Chromium for the dashboard browser tests when it is absent.
set -uo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
[ "$(id -u)" = 0 ] || { echo "browser: not root, cannot install chromium"; exit 1; }
command -v apt-get >/dev/null 2>&1 || { echo "browser: no apt-get"; exit 1; }
export DEBIAN_FRONTEND=noninteractive
timeout 300 apt-get update -qq >/dev/null && timeout 300 apt-get install -y -qq chromium >/dev/null
