#!/usr/bin/env bash
# Warm 1 MiB sequential reads through the daemon (a mount without passthrough, as an ordinary
# user's) against reading the same file directly, for several sizes of the kernel's read-ahead
# of the mount (`pliant fs mount --kernel-read-ahead`): the sweep behind the size the docs
# suggest (issue 32: "warm 1 MiB sequential read >= 90% of direct" without passthrough).
#
# What it measures
#   The kernel sends reads through its page cache to a FUSE daemon in requests no larger than
#   the mount's read-ahead, 128 KiB unless root raises it; on a VM whose idle CPUs halt, each
#   request's round trip costs more than its copy. Per round, for each SIZE in turn ("default"
#   = the kernel's own): a fresh `pliant fs mount --no-passthrough [--kernel-read-ahead SIZE]`
#   over a directory holding the file, its cache directory on the same file system; the file
#   read once through it (copied up: the cache holds it), then PAIRS times: page cache dropped,
#   fio reads the file directly (psync, bs 1m); page cache dropped, fio reads it through the
#   mount. The mount's read requests and their mean size (`pliant fs stat`) are kept, and, for
#   the cost of a large read-ahead, MMAP_IOS 4 KiB random reads of a mapping of the file through
#   the mount (fio ioengine=mmap with no madvise hint, as most programs map files; page cache
#   dropped first): each page fault makes the kernel read the read-ahead's size around it, so
#   the daemon's bytes read for them and their mean latency are kept. Rounds repeat the sizes
#   in the same order.
#   Reports per size: median MB/s through the mount, the median of the per-pair ratios to
#   direct with their min-max, the mean read request, and what the mapped random reads cost.
#
# Usage
#   tools/bench/fs_kernel_read_ahead.sh [--size SIZE] [--rounds N] [--pairs N] [--sizes 'default 1MiB 4MiB …'] [--out DIR]
#   --size     file size (default 1GiB)
#   --rounds   rounds over every size (default 2)
#   --pairs    direct/mount pairs per size and round (default 3)
#   --sizes    read-ahead sizes (default 'default 1MiB 2MiB 4MiB 8MiB 16MiB')
#   --out      fio JSON, mount logs and results.csv (default target/fs_kernel_read_ahead)
#   env: PLIANT_BIN (default target/release/pliant, not built here), WORK_BASE (default /var/tmp),
#   MMAP_IOS (default 200)
#
# Needs root (drop_caches, and --kernel-read-ahead is root's), fio, python3. Every mount it
# starts is stopped at exit (by its pid), and the work directory is removed.

set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/fs_mount.sh

SIZE_MIB=1024
ROUNDS=2
PAIRS=3
SIZES="default 1MiB 2MiB 4MiB 8MiB 16MiB"
OUT=target/fs_kernel_read_ahead
MMAP_IOS=${MMAP_IOS:-200}
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE_MIB=$(size_mib "$2"); shift ;;
        --rounds) ROUNDS=$2; shift ;;
        --pairs) PAIRS=$2; shift ;;
        --sizes) SIZES=$2; shift ;;
        --out) OUT=$2; shift ;;
        -h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

bench_setup fs_kernel_read_ahead.sh "$SIZE_MIB" fio python3 mountpoint
BACK=$WORK/back; CACHE=$WORK/cache; MNT=$WORK/mnt
mkdir -p "$BACK" "$MNT"

quiet() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# fio_read NAME FILE RW BS [options]: prints MB/s and IOPS.
fio_read() {
    local name=$1 file=$2 rw=$3 bs=$4; shift 4
    fio --name="$name" --filename="$file" --rw="$rw" --bs="$bs" --size="${SIZE_MIB}m" \
        --output-format=json --output="$OUT/$name.json" "$@" >/dev/null
    python3 "$HELP" fio "$OUT/$name.json" | awk '{ printf "%.1f %.0f", $1 / 1e6, $2 }'
}
stat_field() { "$BIN" fs stat "$MNT" --json | python3 "$HELP" get - "$1" 0; }
# reads: the bytes the daemon has served reads of, and in how many requests, from one `fs stat`.
reads() {
    "$BIN" fs stat "$MNT" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["read_hit_bytes"] + s["read_miss_bytes"], s["read_requests"])'
}

# Seeded random data (fio's own pattern is compressible: the disk must not skip work).
python3 -c '
import random, sys
r = random.Random(32)
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(r.randbytes(1 << 20))
' "$BACK/f.dat" "$SIZE_MIB"
sync

echo "size,round,pair,direct_mbps,mount_mbps,read_requests,read_bytes,mmap_daemon_mib,mmap_lat_us" >"$OUT/results.csv"
echo "== warm ${SIZE_MIB} MiB sequential read through the daemon, kernel read-ahead $SIZES; $ROUNDS rounds of $PAIRS pairs; load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
    for s in $SIZES; do
        opt=()
        [ "$s" = default ] || opt=(--kernel-read-ahead "$s")
        rm -rf "$CACHE"
        out=$("$BIN" fs mount "$BACK" "$MNT" --cache-dir "$CACHE" --capacity "$((SIZE_MIB * 2))MiB" \
            --no-passthrough "${opt[@]}")
        DAEMON_PID=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
        [ -n "$DAEMON_PID" ] || { echo "fs_kernel_read_ahead.sh: mount said: $out" >&2; exit 1; }
        ra=$(cat "/sys/class/bdi/$(mountpoint -d "$MNT")/read_ahead_kb")
        cat "$MNT/f.dat" >/dev/null  # copied up behind this read
        for ((i = 0; ; i++)); do  # until the copy-up behind it has ended (at most 30 s)
            [ "$(stat_field copy_up_bytes)" -ge $((SIZE_MIB << 20)) ] && break
            [ $i -lt 150 ] || { echo "fs_kernel_read_ahead.sh: the copy-up of $s round $r has not ended: its reads are not warm" >&2; break; }
            sleep 0.2
        done
        for ((p = 1; p <= PAIRS; p++)); do
            quiet
            read -r d _ <<<"$(fio_read "direct-$s-$r-$p" "$BACK/f.dat" read 1m --ioengine=psync)"
            quiet
            read -r b0 q0 <<<"$(reads)"
            read -r m _ <<<"$(fio_read "mount-$s-$r-$p" "$MNT/f.dat" read 1m --ioengine=psync)"
            read -r b q <<<"$(reads)"; b=$((b - b0)); q=$((q - q0))
            mb=; lat=
            if [ "$p" = 1 ]; then
                quiet
                read -r b0 _ <<<"$(reads)"
                fio_read "mmap-$s-$r" "$MNT/f.dat" randread 4k --ioengine=mmap --fadvise_hint=0 --number_ios=$MMAP_IOS \
                    --randseed=32 >/dev/null
                read -r b1 _ <<<"$(reads)"; mb=$(((b1 - b0) >> 20))
                lat=$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["read"]["clat_ns"]["mean"] / 1e3))' \
                    "$OUT/mmap-$s-$r.json")
            fi
            echo "$s,$r,$p,$d,$m,$q,$b,$mb,$lat" >>"$OUT/results.csv"
            echo "  read-ahead $s (${ra} KiB): direct $d MB/s, mount $m MB/s in $q requests${mb:+; $MMAP_IOS mapped 4 KiB random reads: the daemon read $mb MiB, $lat µs each}"
        done
        timeout 300 "$BIN" fs unmount "$MNT" >/dev/null
        wait_gone "$DAEMON_PID" 60 || { echo "fs_kernel_read_ahead.sh: daemon $DAEMON_PID still running" >&2; exit 1; }
        DAEMON_PID=
        cp "$CACHE/mount.log" "$OUT/logs/$s-$r.log"
    done
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT/results.csv" "$MMAP_IOS" $SIZES <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"| kernel read-ahead | through the daemon, median MB/s | median ratio to direct (min-max) | mean read request | {sys.argv[2]} mapped 4 KiB random reads: daemon MiB read, mean µs |")
print("|---|---:|---:|---:|---:|")
for s in sys.argv[3:]:
    rs = [r for r in rows if r["size"] == s]
    m = [float(r["mount_mbps"]) for r in rs]
    ratio = [float(r["mount_mbps"]) / float(r["direct_mbps"]) for r in rs]
    req = sum(int(r["read_bytes"]) for r in rs) / max(1, sum(int(r["read_requests"]) for r in rs))
    mm = [(int(r["mmap_daemon_mib"]), int(r["mmap_lat_us"])) for r in rs if r["mmap_daemon_mib"]]
    mib = statistics.median(x for x, _ in mm)
    lat = statistics.median(y for _, y in mm)
    print(f"| {s} | {statistics.median(m):.0f} | {statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f}) "
          f"| {req / 1024:.0f} KiB | {mib:.0f} MiB, {lat:.0f} µs |")
EOF
