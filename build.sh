#!/bin/bash
# Installs what the build needs (Debian packages), builds sbx into ./build and, as root,
# installs it (meson install: sbx on PATH).
set -euo pipefail
cd "$(dirname "$0")"

# python3-prometheus-client: the tests parse GET /metrics with Prometheus' own parser.
# tmux: the tests drive sbx shell in a terminal of its own. man-db (and its groff-base): the
# tests render the man pages, and `man sbx` reads them. openssl and iproute2: the egress tests
# make their HTTPS servers' certificates and a network namespace with a fake DNS server.
PACKAGES=(gcc libc6-dev pkg-config meson ninja-build bash-builtins libjansson-dev
          libseccomp-dev libarchive-dev nettle-dev libinih-dev zstd python3 python3-pytest python3-venv
          procps curl tmux man-db libc-ares-dev libgnutls28-dev openssl iproute2 libmicrohttpd-dev
          libcurl4-gnutls-dev python3-prometheus-client)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "build.sh: missing packages: ${missing[*]}" >&2
        echo "build.sh: run as root, or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "build.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Code contexts (context.create, code.run) run the host's python3 with IPython; matplotlib and
# pandas are what their tests (and most agents' cells) use. Without recommends: no GUI toolkits.
CODE_PACKAGES=(python3-ipython python3-matplotlib python3-pandas)
missing=()
for p in "${CODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "build.sh: code contexts need: ${missing[*]} (sudo apt-get install --no-install-recommends ${missing[*]})" >&2
    else
        echo "build.sh: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
                { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
    fi
fi

# The operator console's terminal is xterm.js, from npm (pinned in console/package.json), served
# from the console's files. Without npm (or the registry) the console runs without a terminal.
if [ ! -f console/node_modules/@xterm/xterm/lib/xterm.js ]; then
    if command -v npm >/dev/null 2>&1; then
        (cd console && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) ||
            echo "build.sh: npm ci in console/ failed: the console will have no terminal" >&2
    else
        echo "build.sh: npm is missing: the console will have no terminal (apt-get install npm)" >&2
    fi
fi

if [ ! -f build/build.ninja ]; then
    meson setup build >/dev/null
fi
ninja -C build >/dev/null
# Installs sbx on PATH, with the header, libsbx and its pkg-config file for embedders, its man
# pages, bash completion and systemd units (meson's prefix, /usr/local by default: bin/sbx,
# include/sbx/sbx.h, lib/<multiarch>/libsbx.so, lib/<multiarch>/pkgconfig/sbx.pc,
# share/man/man1/sbx*.1, share/bash-completion/completions/sbx,
# lib/systemd/system/sbx.{socket,service}). That needs root; otherwise the build is left as it is.
if [ "$(id -u)" = 0 ]; then
    meson install -C build --no-rebuild --quiet >/dev/null
    "$(command -v ldconfig || echo /sbin/ldconfig)"
    echo "build.sh: built and installed $(command -v sbx || echo "sbx (not on PATH?)")" >&2
else
    echo "build.sh: built build/src/cli/sbx; to install it (on PATH): sudo meson install -C build" >&2
fi
