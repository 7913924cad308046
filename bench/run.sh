#!/bin/bash
# Builds sbx, installs what the benchmarks compare against (bubblewrap, the npm package
# just-bash), runs sbx-bench, then sbx-bench-rpc (the daemon over its Unix socket), then
# sbx-bench-image (fork, snapshot, restore), then sbx-bench-ports (exposed ports), then
# sbx-bench-density (memory per sandbox, ping during a burst of creates), then
# bench/code_cells.py (code cells against a Jupyter kernel), and prints a
# Markdown report on stdout (also saved to bench/.results/). Progress goes to stderr.
#
# Usage: bench/run.sh [sbx-bench options]      e.g. bench/run.sh --quick
# --quick is passed on to sbx-bench-rpc, sbx-bench-image and sbx-bench-ports too (the image one
# then takes -n 3);
# their other options go in SBX_BENCH_RPC_ARGS, SBX_BENCH_IMAGE_ARGS, SBX_BENCH_PORTS_ARGS,
# SBX_BENCH_DENSITY_ARGS and SBX_BENCH_CODE_ARGS, and SBX_BENCH_RPC=0, SBX_BENCH_IMAGE=0,
# SBX_BENCH_PORTS=0, SBX_BENCH_REDACT=0, SBX_BENCH_DENSITY=0 or SBX_BENCH_CODE=0 skips one
# (sbx-bench-redact takes SBX_BENCH_REDACT_ARGS).
# Needs root (sandboxes, cgroups) and takes about 7 minutes with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JB_VERSION=${JB_VERSION:-3.4.2}
JB_PREFIX=$ROOT/bench/.npm
log() { echo "run.sh: $*" >&2; }

# --- build
if [ ! -f build/build.ninja ]; then
        meson setup build >&2
fi
ninja -C build >&2

# --- bubblewrap (benchmark c); sbx-bench skips it with a note when it is missing or fails
if ! command -v bwrap >/dev/null 2>&1; then
        log "installing bubblewrap"
        { apt-get install -y bubblewrap || { apt-get update && apt-get install -y bubblewrap; }; } >&2 ||
                log "bubblewrap could not be installed: benchmark c will be skipped"
fi

# --- just-bash (benchmark d), into a gitignored folder
JB_ARGS=()
if ! command -v node >/dev/null 2>&1; then
        log "node is missing: benchmark d (just-bash) will be skipped"
else
        if [ ! -f "$JB_PREFIX/node_modules/just-bash/package.json" ]; then
                log "installing just-bash@$JB_VERSION into $JB_PREFIX"
                npm install --prefix "$JB_PREFIX" --no-audit --no-fund --loglevel=error \
                        "just-bash@$JB_VERSION" >&2 || log "npm install just-bash failed: benchmark d will be skipped"
        fi
        if [ -f "$JB_PREFIX/node_modules/just-bash/package.json" ]; then
                JB_ARGS=(--justbash "node $ROOT/bench/justbash.mjs --n 500 --modules $JB_PREFIX/node_modules")
        fi
fi

# --- run
mkdir -p bench/.results
OUT=bench/.results/$(date +%Y%m%d-%H%M%S).md
mem_gib=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
{
        echo "# sbx benchmarks"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $mem_gib RAM, kernel $(uname -r)"
        echo "- sbx: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified)'), $(ninja -C build -t query bench/sbx-bench >/dev/null 2>&1 && echo 'build/bench/sbx-bench')"
        echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "- command: bench/run.sh $*"
        echo
} | tee "$OUT"

# CPU time of the whole machine (/proc/stat, busy = all but idle and iowait) against the CPU
# time of the benchmark's own process tree: what is left was used by something else running
# at the same time, which inflates the numbers.
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
TIMECMD=()
if [ -x /usr/bin/time ]; then
        TIMECMD=(/usr/bin/time -f '%U %S' -o bench/.results/.time)
fi
# Runs a benchmark, appending its report to $OUT, then the CPU line for that run.
run_accounted() {
        local b0 b1 t0 t1 hz own_u own_s
        rm -f bench/.results/.time
        b0=$(busy_jiffies)
        t0=$(date +%s.%N)
        "${TIMECMD[@]}" "$@" | tee -a "$OUT"
        b1=$(busy_jiffies)
        t1=$(date +%s.%N)
        hz=$(getconf CLK_TCK)
        read -r own_u own_s < bench/.results/.time 2>/dev/null || { own_u=0; own_s=0; }
        awk -v b0="$b0" -v b1="$b1" -v hz="$hz" -v u="$own_u" -v s="$own_s" -v t0="$t0" -v t1="$t1" 'BEGIN {
                all = (b1 - b0) / hz; own = u + s; other = all - own; if (other < 0) other = 0
                printf "\nCPU during the run: %.1f s wall, %.1f CPU-s used in all, %.1f CPU-s by the benchmark and its children, %.1f CPU-s (%.0f%% of one CPU) by other processes.\n",
                       t1 - t0, all, own, other, 100 * other / (t1 - t0)
        }' | tee -a "$OUT"
}
run_accounted ./build/bench/sbx-bench "${JB_ARGS[@]}" "$@"

# The same throughput runs with glibc's malloc asked to back large allocations with
# transparent huge pages: it shows how much of the gap is page-fault cost of the 1 GiB
# result buffer (see docs/BENCHMARKS.md).
if [ "${SBX_BENCH_HUGETLB:-1}" = 1 ]; then
        log "throughput again with GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
        {
                echo
                echo "## Throughput again, with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (THP for malloc)"
                echo
                GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ./build/bench/sbx-bench "$@" --only g --tp-reps 1 |
                        awk '/^## Throughput/ { on = 1; next } /^## / { on = 0 } on'
        } | tee -a "$OUT"
fi

# The daemon: sbx-bench-rpc starts its own `sbx serve --socket` in a fresh /tmp directory and
# shuts it down at the end (see docs/BENCHMARKS.md, "The daemon").
if [ "${SBX_BENCH_RPC:-1}" = 1 ]; then
        RPC_ARGS=()
        for a in "$@"; do
                if [ "$a" = --quick ]; then RPC_ARGS+=(--quick); fi
        done
        read -r -a RPC_EXTRA <<< "${SBX_BENCH_RPC_ARGS:-}"
        log "the daemon: build/bench/sbx-bench-rpc ${RPC_ARGS[*]} ${RPC_EXTRA[*]}"
        {
                echo
                echo "# The daemon (JSON-RPC over a Unix socket)"
                echo
                echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
                echo
        } | tee -a "$OUT"
        run_accounted ./build/bench/sbx-bench-rpc "${RPC_ARGS[@]}" "${RPC_EXTRA[@]}"
fi
# Fork, snapshots and restore of sandboxes holding 100 MB or 10,000 files (see
# docs/BENCHMARKS.md); about 40 s with the defaults.
if [ "${SBX_BENCH_IMAGE:-1}" = 1 ]; then
        IMAGE_ARGS=()
        for a in "$@"; do
                if [ "$a" = --quick ]; then IMAGE_ARGS+=(--quick); fi
        done
        read -r -a IMAGE_EXTRA <<< "${SBX_BENCH_IMAGE_ARGS:-}"
        log "fork, snapshots: build/bench/sbx-bench-image ${IMAGE_ARGS[*]} ${IMAGE_EXTRA[*]}"
        {
                echo
                echo "# Fork, snapshots and restore"
                echo
                echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
                echo
        } | tee -a "$OUT"
        run_accounted ./build/bench/sbx-bench-image "${IMAGE_ARGS[@]}" "${IMAGE_EXTRA[@]}"
fi
# A sandbox's port exposed on the host's loopback: HTTP GETs through it against the same server
# on the host, and 1 GiB through both (bench/bench_ports.c); about 20 s with the defaults.
if [ "${SBX_BENCH_PORTS:-1}" = 1 ]; then
        PORTS_ARGS=()
        for a in "$@"; do
                if [ "$a" = --quick ]; then PORTS_ARGS+=(--quick); fi
        done
        read -r -a PORTS_EXTRA <<< "${SBX_BENCH_PORTS_ARGS:-}"
        log "exposed ports: build/bench/sbx-bench-ports ${PORTS_ARGS[*]} ${PORTS_EXTRA[*]}"
        {
                echo
                echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
                echo
        } | tee -a "$OUT"
        run_accounted ./build/bench/sbx-bench-ports "${PORTS_ARGS[@]}" "${PORTS_EXTRA[@]}"
fi
# Redaction on against off: the redactor alone, 1 GiB through runs, warm `echo hi`
# (bench/bench_redact.c); about 30 s. --quick: 256 MiB, one run each, 100 warm runs.
if [ "${SBX_BENCH_REDACT:-1}" = 1 ]; then
        REDACT_ARGS=()
        for a in "$@"; do
                if [ "$a" = --quick ]; then REDACT_ARGS+=(--tp-mib 256 --tp-reps 1 -n 100); fi
        done
        read -r -a REDACT_EXTRA <<< "${SBX_BENCH_REDACT_ARGS:-}"
        log "redaction: build/bench/sbx-bench-redact ${REDACT_ARGS[*]} ${REDACT_EXTRA[*]}"
        {
                echo
                echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
                echo
        } | tee -a "$OUT"
        run_accounted ./build/bench/sbx-bench-redact "${REDACT_ARGS[@]}" "${REDACT_EXTRA[@]}"
fi
# Density: memory per idle sandbox with a warm session at 100, 500 and 1,000 sandboxes, and
# ping while 500 are made in one burst from 50 clients (bench/bench_density.c); about 30 s.
if [ "${SBX_BENCH_DENSITY:-1}" = 1 ]; then
        DENSITY_ARGS=()
        for a in "$@"; do
                if [ "$a" = --quick ]; then DENSITY_ARGS+=(--quick); fi
        done
        read -r -a DENSITY_EXTRA <<< "${SBX_BENCH_DENSITY_ARGS:-}"
        log "density: build/bench/sbx-bench-density ${DENSITY_ARGS[*]} ${DENSITY_EXTRA[*]}"
        {
                echo
                echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
                echo
        } | tee -a "$OUT"
        run_accounted ./build/bench/sbx-bench-density "${DENSITY_ARGS[@]}" "${DENSITY_EXTRA[@]}"
fi
# Code cells: sbx's Python contexts against a Jupyter kernel (Debian's python3-ipykernel through
# python3-jupyter-client): `x = 1`, a cell with 1 GiB held, a killed cell to the next output
# (bench/code_cells.py); about 40 s. --quick: small N.
if [ "${SBX_BENCH_CODE:-1}" = 1 ]; then
        CODE_ARGS=(--sbx ./build/src/cli/sbx)
        for a in "$@"; do
                if [ "$a" = --quick ]; then CODE_ARGS+=(--quick); fi
        done
        read -r -a CODE_EXTRA <<< "${SBX_BENCH_CODE_ARGS:-}"
        if ! /usr/bin/python3 -c 'import IPython, ipykernel, jupyter_client, numpy' 2>/dev/null; then
                log "installing python3-ipykernel, python3-jupyter-client, python3-numpy"
                { apt-get install -y python3-ipykernel python3-jupyter-client python3-numpy ||
                        { apt-get update && apt-get install -y python3-ipykernel python3-jupyter-client python3-numpy; }; } >&2 ||
                        log "they could not be installed: bench/code_cells.py will fail"
        fi
        log "code cells: bench/code_cells.py ${CODE_ARGS[*]} ${CODE_EXTRA[*]}"
        {
                echo
                echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
                echo
        } | tee -a "$OUT"
        run_accounted /usr/bin/python3 bench/code_cells.py "${CODE_ARGS[@]}" "${CODE_EXTRA[@]}"
fi
echo | tee -a "$OUT"
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
log "report saved to $OUT"
