#!/bin/bash
# Builds sbx and runs every test: C unit tests (meson) and integration tests (pytest).
set -uo pipefail
cd "$(dirname "$0")"
./build.sh || exit 1

status=0
meson test -C build --print-errorlogs || status=1
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration || status=1
exit $status
