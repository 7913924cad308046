#!/bin/bash
# Builds sbx and runs every test: C unit tests (meson), integration tests (pytest) and the
# TypeScript SDK's tests (node --test, when Node.js >= 18 is there), then the C and pytest ones
# again on a second build under AddressSanitizer and UndefinedBehaviorSanitizer, where any
# report fails it, then the fuzz targets for a bounded time. SBX_SANITIZERS=0 and
# SBX_FUZZ_SECONDS=0 skip those; SBX_KUBE=0 skips building Kubernetes for the cluster test.
set -uo pipefail
cd "$(dirname "$0")"
./build.sh || exit 1

status=0
# The console's browser tests drive Debian's chromium (tests/integration/test_console.py skips,
# saying why, without it).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "test.sh: installing chromium for the console's browser tests" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 ||
                { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; }
fi

# The cluster test's Kubernetes (control plane from Debian's source package): built once per
# machine and cached (/var/cache/sbx); without it test_kube.py skips, saying why.
if [ "${SBX_KUBE:-1}" != 0 ]; then
        tests/kube/build-kubernetes.sh >/dev/null ||
                echo "test.sh: Kubernetes could not be built (tests/kube/build-kubernetes.sh): the cluster test skips" >&2
fi
meson test -C build --print-errorlogs || status=1
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration || status=1
# The TypeScript SDK's tests (node's own runner, against this build's daemon; the npm pack test
# needs npm too). They need Node.js 18 or later, which build.sh does not install.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -ge 18 ]; then
        SBX_BIN="$PWD/build/src/cli/sbx" node --test sdk/typescript/test/*.test.mjs || status=1
elif command -v node >/dev/null 2>&1; then
        echo "test.sh: node $(node --version) is older than 18: the TypeScript SDK's tests were not run" >&2
else
        echo "test.sh: node is missing: the TypeScript SDK's tests were not run (they need Node.js >= 18)" >&2
fi

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
# The fuzz targets for a bounded time each, on their corpora (new inputs go to a scratch copy,
# not the tree's corpus): libFuzzer needs clang, installed here if it is missing.
if [ "${SBX_FUZZ_SECONDS:-20}" != 0 ]; then
        if ! command -v clang >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
                echo "test.sh: installing clang for the fuzz targets" >&2
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null 2>&1 ||
                        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null 2>&1; }
        fi
        if command -v clang >/dev/null 2>&1; then
                echo "test.sh: fuzz targets, ${SBX_FUZZ_SECONDS:-20} s each (build-fuzz/)" >&2
                if [ ! -f build-fuzz/build.ninja ]; then
                        CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined \
                                -Db_lundef=false >/dev/null || exit 1
                fi
                ninja -C build-fuzz tests/fuzz/fuzz-rpc tests/fuzz/fuzz-archive tests/fuzz/fuzz-egress-tls >/dev/null || exit 1
                for t in rpc archive egress-tls; do
                        scratch=$(mktemp -d)
                        if build-fuzz/tests/fuzz/fuzz-$t -max_total_time="${SBX_FUZZ_SECONDS:-20}" \
                                -artifact_prefix=build-fuzz/crash-$t- -print_final_stats=0 \
                                "$scratch" tests/fuzz/corpus/$t >"build-fuzz/fuzz-$t.log" 2>&1; then
                                echo "test.sh: fuzz-$t: $(grep -m1 -o 'Done [0-9]* runs[^$]*' build-fuzz/fuzz-$t.log), no finding" >&2
                        else
                                echo "test.sh: fuzz-$t FOUND A CRASH (build-fuzz/fuzz-$t.log, build-fuzz/crash-$t-*)" >&2
                                tail -40 "build-fuzz/fuzz-$t.log" >&2
                                status=1
                        fi
                        rm -rf "$scratch"
                done
        else
                echo "test.sh: clang could not be installed: the fuzz targets were not run" >&2
        fi
fi
exit $status
