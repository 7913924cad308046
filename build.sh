#!/bin/bash
# Installs what the build needs (Debian packages) and builds sbx into ./build.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(gcc libc6-dev pkg-config meson ninja-build bash-builtins libjansson-dev
          libseccomp-dev libarchive-dev nettle-dev zstd python3 python3-pytest procps curl)
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

if [ ! -f build/build.ninja ]; then
    meson setup build >/dev/null
fi
ninja -C build >/dev/null
echo "build.sh: built build/src/cli/sbx" >&2
