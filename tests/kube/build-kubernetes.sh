#!/bin/bash
# Builds the Kubernetes control plane the cluster test runs (kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl) from Debian 12's own source package, once per machine: the
# binaries are cached in $SBX_KUBE_CACHE (default /var/cache/sbx/kubernetes-<version>) and a
# second run only checks them. Needs root for apt-get; about 20 minutes on 2 CPUs.
# Why from source: Debian 12 packages only kubectl and etcd, and the source package carries the
# whole tree with vendor/, so nothing is fetched but Debian's own archives.
set -euo pipefail
version=1.20.5+really1.20.2-1.1+deb12u1
cache=${SBX_KUBE_CACHE:-/var/cache/sbx/kubernetes-1.20.2}
bins="kube-apiserver kube-scheduler kube-controller-manager kubectl"

have_all() { for b in $bins; do [ -x "$cache/bin/$b" ] || return 1; done; }
if have_all && [ -f "$cache/bin/.complete" ]; then
        echo "$cache/bin"
        exit 0
fi
if [ "$(id -u)" != 0 ]; then
        echo "build-kubernetes: not cached in $cache and not root (apt-get needs root)" >&2
        exit 1
fi
mkdir -p "$cache"
work=$cache/src
rm -rf "$work" && mkdir -p "$work"
log=$cache/build.log
: >"$log"
echo "build-kubernetes: building Kubernetes 1.20.2 from Debian's source package into $cache (log $log)" >&2

export DEBIAN_FRONTEND=noninteractive
need="golang-go dpkg-dev rsync golang-github-modern-go-reflect2-dev etcd-server"
missing=
for p in $need; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
        apt-get install -y -qq $missing >>"$log" 2>&1 ||
                { apt-get update -qq >>"$log" 2>&1 && apt-get install -y -qq $missing >>"$log" 2>&1; }
fi

# A private apt configuration that knows bookworm's sources, so the host's own is untouched.
apt=$work/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        sed -nE 's/^(URIs:|deb( \[[^]]*\])?) +(https?:\/\/[^ ]*debian\/?)( .*)?$/\3/p' | grep -v security | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
echo "deb-src ${mirror%/} bookworm main" >"$apt/sources.list"
aopts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=-"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
apt-get "${aopts[@]}" update -qq >>"$log" 2>&1
(cd "$work" && apt-get "${aopts[@]}" source --download-only "kubernetes=$version" >>"$log" 2>&1)
(cd "$work" && dpkg-source -x kubernetes_*.dsc tree >>"$log" 2>&1)

# vendor's reflect2 1.0.1 does not build with Go >= 1.18; Debian's 1.0.2 does.
rm -rf "$work/tree/vendor/github.com/modern-go/reflect2"
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$work/tree/vendor/github.com/modern-go/reflect2"

(cd "$work/tree" && KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean CGO_ENABLED=0 \
        GOFLAGS=-mod=vendor GOCACHE="$work/gocache" \
        make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubectl" >>"$log" 2>&1) ||
        { tail -30 "$log" >&2; exit 1; }
mkdir -p "$cache/bin"
for b in $bins; do
        install -m 0755 "$work/tree/_output/local/bin/linux/"*/"$b" "$cache/bin/$b" 2>/dev/null ||
                install -m 0755 "$work/tree/_output/bin/$b" "$cache/bin/$b"
done
touch "$cache/bin/.complete"
rm -rf "$work"
echo "$cache/bin"
