#!/usr/bin/env bash
# Cold sequential reads through `pliant fs mount` (through the daemon: --no-passthrough) by the
# read-ahead window, against reading the backing directory directly: the sensitivity of
# `--read-ahead` (crates/fs/src/core/extents.rs, `read_ahead`).
#
# What it measures
#   A SIZE file in a backing directory on the same file system as the cache directory. Each
#   round, for each window in WINDOWS (extents of 1 MiB; 0 is no read-ahead) and once directly:
#   a fresh mount with an empty cache directory, the page cache dropped
#   (`sync; echo 3 > /proc/sys/vm/drop_caches`), then `dd bs=1M` of the whole file through the
#   mount (every extent copied up from the backing file: a cold read), timed; the mount
#   unmounted. The direct read is the same dd of the backing file. Rounds interleave the
#   settings, so drift on a shared machine hits all alike. With SLOW=RATE the backing directory
#   is `pliant bench slow-fs` at RATE a stream (say 50MB, one Lustre client stream), the slow
#   parallel file system the cache stands in front of: there a copy-up waits on the backing
#   store, and read-ahead is what lets copies overlap the reads.
#
# How to read it
#   stdout: one markdown row per setting: MB/s of each round, the median, and the median over
#   the direct read's (the issue's goal for a cold read through the daemon: >= 0.70).
#
# Usage
#   tools/bench/fs_read_ahead.sh
#   env: SIZE_MIB (512), ROUNDS (3), WINDOWS ("0 1 8 32"), SLOW (off), PLIANT_BIN (default
#   target/release/pliant, built if missing), WORK_BASE (default target: a local disk)
#
# Needs root (drop_caches, FUSE mounts), fuse3, dd, python3. Loopback nothing; every mount it
# makes is unmounted by `pliant fs unmount`, and the work directory is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE_MIB=${SIZE_MIB:-512} ROUNDS=${ROUNDS:-3} WINDOWS=${WINDOWS:-"0 1 8 32"}
[ "$(id -u)" = 0 ] || { echo "fs_read_ahead.sh: needs root (drop_caches, FUSE mounts)" >&2; exit 1; }
BIN=${PLIANT_BIN:-target/release/pliant}
[ -x "$BIN" ] || cargo build --release --locked -q
WORK=$(mktemp -d "${WORK_BASE:-$PWD/target}/fs_read_ahead.XXXXXX")
MNT=$WORK/mnt
SLOWPID=
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then "$BIN" fs unmount --discard "$MNT" >/dev/null 2>&1 || umount -l "$MNT"; fi
    if [[ -n $SLOWPID ]]; then kill "$SLOWPID" 2>/dev/null || true; wait "$SLOWPID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/data" "$MNT"
dd if=/dev/urandom of="$WORK/data/f" bs=1M count="$SIZE_MIB" status=none
sync
BACKING=$WORK/data
if [[ -n ${SLOW:-} ]]; then
    BACKING=$WORK/slow
    mkdir -p "$BACKING"
    "$BIN" bench slow-fs "$WORK/data" "$BACKING" --stream-rate "$SLOW" &
    SLOWPID=$!
    for _ in $(seq 100); do mountpoint -q "$BACKING" && break; sleep 0.1; done
    mountpoint -q "$BACKING" || { echo "fs_read_ahead.sh: slow-fs did not mount" >&2; exit 1; }
fi

# MB/s of a dd of $1, the page cache dropped first.
read_mbs() {
    sync; echo 3 > /proc/sys/vm/drop_caches
    local t0 t1
    t0=$(date +%s.%N)
    dd if="$1" of=/dev/null bs=1M status=none
    t1=$(date +%s.%N)
    awk -v s="$SIZE_MIB" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", s * 1.048576 / (b - a) }'
}

declare -A runs
for r in $(seq 1 "$ROUNDS"); do
    runs[direct]+="$(read_mbs "$BACKING/f") "
    for w in $WINDOWS; do
        rm -rf "$WORK/cache"
        "$BIN" fs mount "$BACKING" "$MNT" --cache-dir "$WORK/cache" --capacity "$((SIZE_MIB * 2))MiB" \
            --no-passthrough --read-ahead "$w" >/dev/null
        runs[$w]+="$(read_mbs "$MNT/f") "
        "$BIN" fs unmount "$MNT" >/dev/null
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
direct=$(echo "${runs[direct]}" | median)
echo "| read-ahead (extents) | MB/s, each round | median MB/s | / direct |"
echo "|---|---|---:|---:|"
echo "| direct (backing) | ${runs[direct]% } | $direct | 1.00 |"
for w in $WINDOWS; do
    m=$(echo "${runs[$w]}" | median)
    echo "| $w | ${runs[$w]% } | $m | $(awk -v a="$m" -v b="$direct" 'BEGIN { printf "%.2f", a / b }') |"
done
