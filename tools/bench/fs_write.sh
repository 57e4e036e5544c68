#!/usr/bin/env bash
# The write path of `pliant fs mount` against writing the same directory directly: fio's 1 MiB
# (or --bs) sequential write + fsync at the end (issue 32: "writes at disk speed", goal >= 90% of direct
# for a mount without passthrough).
#
# What it measures
#   Per repetition, one after another on an idle mount: fio (ioengine=psync, direct=0, one job,
#   bs=BS, end_fsync=1, fallocate=none) writes SIZE into a fresh file, once directly in a
#   directory, and once through each VARIANT: a fresh `pliant fs mount` over that same
#   directory, with its cache directory on the same file system (so the data path is measured,
#   not two disks), `--no-passthrough` (what an ordinary user's mount gets) and the variant's own
#   options. The order of direct and the variants rotates from one repetition to the next, so
#   drift of the shared machine falls on all of them alike.
#   - No write-back runs inside the measured window: capacity is 4 x SIZE, --dirty-high 95%
#     (nothing is written back before 3.8 x SIZE is dirty), the write window is far
#     above SIZE, and --max-file-size is 2 x SIZE. (Checked: the mount's writeback_bytes counter
#     must be 0 after the fio run, or the run is reported as tainted.)
#   - Before every run: `sync` and the page cache dropped, so no earlier run's dirty data is
#     being written while this one runs. After each mounted run the mount is unmounted with
#     --discard (the write-back to the backing directory is not what this measures; part b of
#     fs_fio.sh measures that).
#   - --rewrite: the file is there before each run (SIZE bytes written into the backing directory
#     directly and synced, so a mount's cache does not hold it), and the writer opens it with
#     O_TRUNC, as a shell's `>` and most tools rewriting an output do: `dd conv=fsync` (fio
#     cannot open with O_TRUNC), timed around the whole command, the fsync included.
#   Reports, for direct and every variant, the median MB/s with its spread (min-max and the
#   interquartile range over REPS runs), and the median of the per-repetition ratios
#   variant / direct with their min-max.
#
# Usage
#   tools/bench/fs_write.sh [--size SIZE] [--bs BS] [--reps N] [--rewrite] [--out DIR] [--variant NAME='OPTIONS']...
#   --size     file size (default 1GiB; 512MiB, 2G or a number of MiB)
#   --bs       fio's block size, the size of each write() (default 1m; e.g. 4k)
#   --reps     repetitions (default 10)
#   --variant  a mount to measure, named NAME, with extra `pliant fs mount` OPTIONS (words of
#              the form VAR=VALUE go to the daemon's environment instead; the word
#              `passthrough` leaves out --no-passthrough: a root mount's passthrough); repeatable
#              (default: one variant, "mount", with no extra options)
#   --rewrite  rewrite an existing file the cache does not hold, opened with O_TRUNC (above)
#   --out      fio JSON, mount logs and results.csv (default target/fs_write)
#   env: PLIANT_BIN (default target/release/pliant, not built here), WORK_BASE (default /var/tmp,
#   a local disk: the direct directory and the cache directory both live there)
#
# Needs root (drop_caches), fio, python3. Every mount it starts is stopped at exit (by its pid),
# and the work directory is removed.

set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/fs_mount.sh

SIZE_MIB=1024
BS=1m
REPS=10
REWRITE=0
OUT=target/fs_write
NAMES=()
OPTS=()
while [ $# -gt 0 ]; do
    case $1 in
        --size) SIZE_MIB=$(size_mib "$2"); shift ;;
        --reps) REPS=$2; shift ;;
        --bs) BS=$2; shift ;;
        --rewrite) REWRITE=1 ;;
        --out) OUT=$2; shift ;;
        --variant) NAMES+=("${2%%=*}"); OPTS+=("${2#*=}"); [[ $2 == *=* ]] || OPTS[-1]=""; shift ;;
        -h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
[ ${#NAMES[@]} -gt 0 ] || { NAMES=(mount); OPTS=(""); }

bench_setup fs_write.sh "$SIZE_MIB" fio python3 mountpoint
DIRECT=$WORK/direct    # written directly, and the mounts' backing directory
CACHE=$WORK/cache      # the mounts' cache directory: the same file system
MNT=$WORK/mnt
mkdir -p "$DIRECT" "$MNT"

quiet() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# fio_write NAME DIR: prints MB/s of a 1 MiB sequential write of SIZE with fsync at the end
# (--rewrite: of DIR/fio.dat, there already, opened with O_TRUNC).
fio_write() {
    if [ "$REWRITE" = 1 ]; then
        local bytes t0 t1 bs
        bytes=$((SIZE_MIB << 20))
        bs=$(numfmt --from=iec "${BS^^}")
        t0=$(date +%s.%N)
        dd if=/dev/zero of="$2/fio.dat" bs="$bs" count=$((bytes / bs)) conv=fsync status=none || return 1
        t1=$(date +%s.%N)
        awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b / (z - a) / 1e6 }'
        return
    fi
    fio --name="$1" --directory="$2" --filename=fio.dat --rw=write --bs="$BS" --size="${SIZE_MIB}m" \
        --ioengine=psync --direct=0 --fallocate=none --end_fsync=1 \
        --output-format=json --output="$OUT/$1.json" >/dev/null
    python3 "$HELP" fio "$OUT/$1.json" | awk '{ printf "%.1f", $1 / 1e6 }'
}

# run_variant I R: one measured write through a fresh mount with variant I's options.
run_variant() {
    local i=$1 r=$2 name=${NAMES[$1]} out bw wb w envs=() opts=() pt=--no-passthrough
    rm -rf "$CACHE" "$DIRECT/fio.dat"
    seed
    for w in ${OPTS[$i]}; do  # words; NAME=VALUE ones go to the daemon's environment
        if [[ $w =~ ^[A-Z_]+= ]]; then envs+=("$w");
        elif [ "$w" = passthrough ]; then pt=;
        else opts+=("$w"); fi
    done
    out=$(env "${envs[@]}" "$BIN" fs mount "$DIRECT" "$MNT" --cache-dir "$CACHE" --capacity "$((SIZE_MIB * 4))MiB" \
        --high 95% --low 90% --dirty-high 95% --dirty-low 90% --max-file-size "$((SIZE_MIB * 2))MiB" \
        --write-window-multiplier 1000 $pt ${opts[@]+"${opts[@]}"})
    DAEMON_PID=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
    [ -n "$DAEMON_PID" ] || { echo "fs_write.sh: mount said: $out" >&2; exit 1; }
    quiet
    bw=$(fio_write "$name-$r" "$MNT")
    wb=$("$BIN" fs stat "$MNT" --json | python3 "$HELP" get - writeback_bytes 0)
    timeout 300 "$BIN" fs unmount --discard "$MNT" >/dev/null
    wait_gone "$DAEMON_PID" 60 || { echo "fs_write.sh: daemon $DAEMON_PID still running" >&2; exit 1; }
    DAEMON_PID=
    cp "$CACHE/mount.log" "$OUT/logs/$name-$r.log"
    echo "$name,$r,$bw,$wb" >>"$OUT/results.csv"
    [ "$wb" = 0 ] || echo "  ($name run $r is tainted: $wb bytes written back inside the window)"
    echo "  $name: $bw MB/s"
}
# seed: with --rewrite, the file to rewrite, written directly and synced.
seed() {
    [ "$REWRITE" = 1 ] || return 0
    head -c "$((SIZE_MIB << 20))" /dev/urandom >"$DIRECT/fio.dat"
    sync "$DIRECT/fio.dat"
}
run_direct() {
    rm -f "$DIRECT/fio.dat"
    seed
    quiet
    local bw
    bw=$(fio_write "direct-$1" "$DIRECT")
    echo "direct,$1,$bw,0" >>"$OUT/results.csv"
    echo "  direct: $bw MB/s"
}

echo "name,rep,mbps,writeback_bytes" >"$OUT/results.csv"
N=$((${#NAMES[@]} + 1))
echo "== ${SIZE_MIB} MiB sequential $([ "$REWRITE" = 1 ] && echo "rewrite with O_TRUNC" || echo write) (bs $BS) + fsync, $REPS interleaved repetitions; load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= REPS; r++)); do
    echo "run $r"
    for ((k = 0; k < N; k++)); do
        j=$(((k + r - 1) % N))  # rotates who goes first
        if [ $j = 0 ]; then run_direct "$r"; else run_variant $((j - 1)) "$r"; fi
    done
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT/results.csv" "${NAMES[@]}" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = ["direct"] + sys.argv[2:]
by = {n: {int(r["rep"]): float(r["mbps"]) for r in rows if r["name"] == n} for n in names}
tainted = {r["name"] for r in rows if r["writeback_bytes"] not in ("0", "")}
def q(v):
    v = sorted(v)
    if len(v) < 4:
        return v[0], v[-1]
    qs = statistics.quantiles(v, n=4)
    return qs[0], qs[2]
print("| | median MB/s | min-max | IQR | median of ratio to direct | ratio min-max |")
print("|---|---:|---:|---:|---:|---:|")
for n in names:
    v = list(by[n].values())
    lo, hi = q(v)
    line = f"| {n}{' (tainted)' if n in tainted else ''} | {statistics.median(v):.0f} | {min(v):.0f}-{max(v):.0f} | {lo:.0f}-{hi:.0f} |"
    if n == "direct":
        line += " 100% | |"
    else:
        ratios = [by[n][r] / by["direct"][r] for r in by[n] if r in by["direct"]]
        line += f" {statistics.median(ratios) * 100:.1f}% | {min(ratios) * 100:.0f}-{max(ratios) * 100:.0f}% |"
    print(line)
EOF
