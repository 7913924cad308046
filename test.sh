#!/bin/bash
# Builds sbx and runs every test: C unit tests (meson) and integration tests (pytest), then the
# same suite again on a second build under AddressSanitizer and UndefinedBehaviorSanitizer,
# where any report fails it. SBX_SANITIZERS=0 skips that second pass.
set -uo pipefail
cd "$(dirname "$0")"
./build.sh || exit 1

status=0
meson test -C build --print-errorlogs || status=1
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration || status=1

if [ "${SBX_SANITIZERS:-1}" != 0 ]; then
        echo "test.sh: the suite again under ASan and UBSan (build-asan/)" >&2
        # No recovery: a UBSan report aborts like an ASan one, so the test that caused it fails.
        if [ ! -f build-asan/build.ninja ]; then
                meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
                        -Dc_args=-fno-sanitize-recover=all >/dev/null || exit 1
        fi
        ninja -C build-asan >/dev/null || exit 1
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
        meson test -C build-asan --print-errorlogs || status=1
        SBX_BIN="$PWD/build-asan/src/cli/sbx" SBX_SANITIZED=1 \
                /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration || status=1
fi
exit $status
