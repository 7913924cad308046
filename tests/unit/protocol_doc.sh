#!/bin/sh
# docs/PROTOCOL.md must be what the method table says: regenerate and compare.
# Fix a failure with: build/src/cli/sbx serve --protocol > docs/PROTOCOL.md
set -eu
sbx="$1"; doc="$2"
if "$sbx" serve --protocol | diff -u "$doc" - ; then
    echo "ok 1 - docs/PROTOCOL.md matches the method table"
else
    echo "not ok 1 - docs/PROTOCOL.md differs from the method table (see diff above)"
fi
echo "1..1"
