#!/usr/bin/env bash
# A checkout-sized tree copied into a `pliant fs mount` and read back: many small files, a cache
# smaller than the data, so eviction and write-back run during the copy.
#
# What it does
#   1. Snapshots the source tree into a work directory (so edits to it during the run do not
#      matter) and lists the sha256 of every file. Source: the Rust toolchain's
#      $(rustc --print sysroot)/lib/rustlib/src if present, else this repository's crates/
#      (--src overrides).
#   2. For scale, copies and reads back the same on a plain directory (no mount). Then
#      mounts an empty BACKING directory through `pliant fs mount` with a capacity of half the
#      total bytes copied (--capacity overrides), and `cp -a`s the snapshot COPIES times into it.
#   3. Drops the kernel page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`), then reads every
#      file back through the mount (sha256sum of each: it reads all the bytes, and checks them).
#   4. Records `pliant fs stat --json` (evictions, write-back, copy-up), unmounts with
#      `pliant fs unmount --json` (flush time), and checks that the sha256 of every file in
#      BACKING equals the source's (sorted lists, diffed); also that type, mode, size and mtime
#      of every entry were kept.
#   Prints a markdown summary (also written to target/fs_tree.md) with PASS or FAIL.
#
# Usage
#   tools/bench/fs_tree.sh [--copies N] [--src DIR] [--capacity SIZE] [--quick]
#   --copies    how many copies of the tree (default 20)
#   --capacity  the cache's capacity (default: half the bytes of all copies; a pliant size such
#               as 64MiB, or bytes)
#   --quick     3 copies
#   env: PLIANT_BIN (default target/release/pliant, not built here), WORK_BASE (default /var/tmp)
#
# Needs root (drop_caches) and FUSE. Every mount and process it starts is stopped by its own
# pid at exit; the work directory is removed. Exit status 1 if the check fails.

set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/fs_mount.sh
ROOT=$PWD

usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; }

COPIES=20
SRC=
CAPACITY=
while [ $# -gt 0 ]; do
    case $1 in
        --copies) COPIES=$2; shift ;;
        --src) SRC=$2; shift ;;
        --capacity) CAPACITY=$2; shift ;;
        --quick) COPIES=3 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

BIN=${PLIANT_BIN:-target/release/pliant}
[ -x "$BIN" ] || { echo "fs_tree.sh: no $BIN (cargo build --release, or set PLIANT_BIN)" >&2; exit 1; }
BIN=$(realpath "$BIN")
[ "$(id -u)" = 0 ] || { echo "fs_tree.sh: needs root (drop_caches)" >&2; exit 1; }
if [ -z "$SRC" ]; then
    SRC=crates
    if command -v rustc >/dev/null; then
        rs="$(rustc --print sysroot)/lib/rustlib/src"
        [ -d "$rs" ] && SRC=$rs
    fi
fi
[ -d "$SRC" ] || { echo "fs_tree.sh: no directory $SRC" >&2; exit 1; }

WORK=$(mktemp -d "${WORK_BASE:-/var/tmp}/fs_tree.XXXXXX")
SNAP=$WORK/src        # the source, frozen
BACKING=$WORK/backing
MNT=$WORK/mnt
CACHE=$WORK/cache
mkdir -p "$BACKING" "$MNT"
SUMMARY=$ROOT/target/fs_tree.md
DAEMON_PID=

clean_up_on_exit

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
field() { python3 -c 'import json, sys; d = json.load(sys.stdin)
for k in sys.argv[1].split("."): d = d[k]
print(d)' "$1"; }

# sha256 of every file under $1, paths relative to it, sorted (NUL-safe for odd names).
sums() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum); }
# Type, mode, size and mtime of every entry under $1 (directories' sizes and mtimes vary with
# the file system, so only their type and mode).
meta() {
    (cd "$1" && find . -mindepth 1 \( -type d -printf '%y %m - - %p\n' \) -o \
        \( ! -type d -printf '%y %m %s %T@ %p\n' \) | LC_ALL=C sort -k5)
}

pl_mount() {
    rm -rf "$CACHE"
    local out
    out=$("$BIN" fs mount "$BACKING" "$MNT" --cache-dir "$CACHE" --capacity "$1")
    DAEMON_PID=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
    [ -n "$DAEMON_PID" ] || { echo "fs_tree.sh: mount said: $out" >&2; exit 1; }
}

pl_unmount() { # pl_unmount REPORT_JSON (bounded: 15 min)
    timeout 900 "$BIN" fs unmount "$MNT" --json >"$1"
    wait_gone "$DAEMON_PID" 60 || { echo "fs_tree.sh: daemon $DAEMON_PID still running" >&2; exit 1; }
    DAEMON_PID=
}

# 1. The source, frozen, and what every copy must hold.
cp -a "$SRC" "$SNAP"
sums "$SNAP" >"$WORK/src.sha"
meta "$SNAP" >"$WORK/src.meta"
FILES1=$(wc -l <"$WORK/src.sha")
BYTES1=$(find "$SNAP" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
FILES=$((FILES1 * COPIES))
BYTES=$((BYTES1 * COPIES))
for ((i = 1; i <= COPIES; i++)); do
    sed "s|  \./|  ./copy-$i/|" "$WORK/src.sha"
done | LC_ALL=C sort -k2 >"$WORK/expect.sha"
[ -n "$CAPACITY" ] || CAPACITY=$((BYTES / 2))
echo "source $SRC: $FILES1 files, $BYTES1 bytes; $COPIES copies: $FILES files, $BYTES bytes; capacity $CAPACITY"

# For scale: the same copy and read-back on a plain directory of the same disk, no mount.
mkdir -p "$WORK/plain"
t0=$(now)
for ((i = 1; i <= COPIES; i++)); do cp -a "$SNAP" "$WORK/plain/copy-$i"; done
sync -f "$WORK/plain/."
PLAIN_COPY_SECS=$(elapsed "$t0" "$(now)")
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now)
sums "$WORK/plain" >/dev/null
PLAIN_READ_SECS=$(elapsed "$t0" "$(now)")
rm -rf "$WORK/plain"

# 2. Copy in.
pl_mount "$CAPACITY"
cp_status=0
t0=$(now)
for ((i = 1; i <= COPIES; i++)); do
    cp -a "$SNAP" "$MNT/copy-$i" 2>>"$WORK/cp.err" || cp_status=$?
done
sync -f "$MNT/."  # what `cp` leaves to the file system is part of the copy
COPY_SECS=$(elapsed "$t0" "$(now)")
"$BIN" fs stat "$MNT" --json >"$WORK/after-copy.json"

# 3. Read back through the mount, from disk (the cache directory or BACKING), not RAM.
sync; echo 3 >/proc/sys/vm/drop_caches
t0=$(now)
sums "$MNT" | LC_ALL=C sort -k2 >"$WORK/mnt.sha"
READ_SECS=$(elapsed "$t0" "$(now)")

# 4. Counters, unmount, check BACKING.
"$BIN" fs stat "$MNT" --json >"$WORK/before-unmount.json"
pl_unmount "$WORK/unmount.json"
FLUSH_SECS=$(field flush_secs <"$WORK/unmount.json")
DIRTY_AT_UNMOUNT=$(field dirty_bytes_at_start <"$WORK/unmount.json")
sums "$BACKING" | LC_ALL=C sort -k2 >"$WORK/backing.sha"
for ((i = 1; i <= COPIES; i++)); do meta "$BACKING/copy-$i" | diff "$WORK/src.meta" - || true; done \
    >"$WORK/meta.diff"
META_DIFF=$(grep -c '^[<>]' "$WORK/meta.diff" || true)

s() { field "$1" <"$WORK/$2.json"; }
if diff -q "$WORK/expect.sha" "$WORK/mnt.sha" >/dev/null; then mnt_ok=ok; else mnt_ok=FAIL; fi
if diff "$WORK/expect.sha" "$WORK/backing.sha" >"$WORK/backing.diff"; then back_ok=ok; else back_ok=FAIL; fi
if [ "$cp_status" = 0 ]; then cp_ok=ok; else cp_ok=FAIL; fi
verdict=PASS
[ "$mnt_ok" = ok ] && [ "$back_ok" = ok ] && [ "$cp_ok" = ok ] || verdict=FAIL
log_errors=$(grep -c -E 'ERROR|panick' "$CACHE/mount.log" || true)
log_warns=$(grep -c 'WARN' "$CACHE/mount.log" || true)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

{
    echo "# pliant fs: a tree copied in and read back ($(date -u +%Y-%m-%dT%H:%MZ))"
    echo
    echo "Source ${SRC#"$ROOT"/} ($FILES1 files, $(mib "$BYTES1") MiB) copied $COPIES times with \`cp -a\` into"
    echo "\`pliant fs mount\` over an empty directory, capacity $(mib "$CAPACITY") MiB (default watermarks)."
    echo "The page cache is dropped before the read-back (sha256sum of every file through the mount)."
    echo
    echo "| | |"
    echo "|---|---:|"
    echo "| files | $FILES |"
    echo "| bytes | $BYTES ($(mib "$BYTES") MiB) |"
    echo "| copy in (cp -a + sync), s | $COPY_SECS ($(awk -v b="$BYTES" -v t="$COPY_SECS" 'BEGIN { printf "%.1f", b / t / 1e6 }') MB/s, $(awk -v n="$FILES" -v t="$COPY_SECS" 'BEGIN { printf "%.0f", n / t }') files/s) |"
    echo "| read back, s | $READ_SECS ($(awk -v b="$BYTES" -v t="$READ_SECS" 'BEGIN { printf "%.1f", b / t / 1e6 }') MB/s) |"
    echo "| for scale, on a plain directory (no mount): copy in, s; read back, s | $PLAIN_COPY_SECS; $PLAIN_READ_SECS |"
    echo "| after the copy: used / dirty / written back, MiB | $(mib "$(s used_bytes after-copy)") / $(mib "$(s dirty_bytes after-copy)") / $(mib "$(s writeback_bytes after-copy)") |"
    echo "| after the copy: evicted extents (MiB) | $(s evicted_extents after-copy) ($(mib "$(s evicted_bytes after-copy)")) |"
    echo "| before unmount: evicted extents (MiB) | $(s evicted_extents before-unmount) ($(mib "$(s evicted_bytes before-unmount)")) |"
    echo "| before unmount: copied up, MiB; hit ratio | $(mib "$(s copy_up_bytes before-unmount)"); $(s hit_ratio before-unmount) |"
    echo "| before unmount: write-back errors, revalidated files, EDQUOT, EFBIG | $(s writeback_errors before-unmount), $(s revalidated_files before-unmount), $(s edquot_writes before-unmount), $(s efbig_writes before-unmount) |"
    echo "| unmount: dirty at start, MiB; flush_secs | $(mib "$DIRTY_AT_UNMOUNT"); $FLUSH_SECS |"
    echo "| cp exit status | $cp_status ($cp_ok) |"
    echo "| sha256 read back through the mount = source | $mnt_ok |"
    echo "| sha256 in BACKING after unmount = source | $back_ok ($(grep -c '^[<>]' "$WORK/backing.diff" || true) diff lines) |"
    echo "| type/mode/size/mtime in BACKING = source | $([ "$META_DIFF" = 0 ] && echo ok || echo "$META_DIFF differing lines") |"
    echo "| mount.log | $log_errors ERROR/panic lines, $log_warns WARN lines |"
    echo
    echo "**$verdict**"
    if [ "$verdict" = FAIL ] || [ "$META_DIFF" != 0 ]; then
        echo
        echo '```'
        head -c 2000 "$WORK/cp.err"
        head -n 20 "$WORK/backing.diff"
        head -n 20 "$WORK/meta.diff"
        echo '```'
    fi
    if [ "$log_errors" != 0 ] || [ "$log_warns" != 0 ]; then
        echo
        echo 'mount.log (first lines at WARN or worse):'
        echo '```'
        grep -E 'WARN|ERROR|panick' "$CACHE/mount.log" | head -n 10
        echo '```'
    fi
} | tee "$SUMMARY"
echo "(written to ${SUMMARY#"$ROOT"/})"
[ "$verdict" = PASS ]
