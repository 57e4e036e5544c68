#!/usr/bin/env bash
# What `pliant fs mount` (the FUSE write-back cache) costs and saves, measured with fio.
#
# What it measures (fio: ioengine=psync, direct=0, one job; every number is the median of REPS runs,
# because the machine is shared and noisy; the phases run one at a time)
#   a. Local backing (a directory on the same disk as the cache directory):
#        1 MiB sequential write (end_fsync=1), 1 MiB sequential read, 4 KiB random read
#        (time-based, RAND_SECS), each directly on the backing directory and through
#        `pliant fs mount` over it (capacity 2 × SIZE, so the file stays cached, and --dirty-high
#        90%, so no write-back runs while the write is measured: the script checks the mount's
#        writeback_bytes after it and prints what, if anything, went back). The read through
#        the mount is warm: the file is in the cache from the write (checked: no copy-up during the
#        measured read). Before each measured read phase the kernel page cache is dropped
#        (`sync; echo 3 > /proc/sys/vm/drop_caches`), so reads come from the cache directory or
#        the backing directory on disk, not from RAM; and before the reads through the mount the
#        script waits until the write-back the write started has stopped. Each measured
#        sequential read is the file's second read since it was written, direct or not (see
#        preread: the first is much slower on this VM either way).
#        Goal: a warm 1 MiB read through the mount at most 10% slower than direct (DataWarp
#        measured 2.1-2.2%). The mount's defaults read a fully cached file through FUSE
#        passthrough; a second mount with --no-passthrough (where pliant has it) measures the
#        reads through the daemon: cold (answered from the backing directory while each
#        extent copies up behind the read; the script waits for those copies to end before
#        going on) and then warm. Then the warm read once more through a third mount with
#        --kernel-read-ahead 4MiB (if this pliant has it): the kernel's read requests up to
#        1 MiB rather than 128 KiB, as root or an administrator can set for a mount.
#        Then the write as an ordinary user's mount makes it (a fresh --no-passthrough mount:
#        the kernel's write cache), and again with --direct-io (no page cache; if this pliant
#        has it), each against the same run's direct write (goal: >= 0.90 of direct); the
#        unmount after each drops the data (--discard), whose write-back is not measured.
#   b. Slow backing (`pliant bench slow-fs`, every data request taking bytes / 50 MB/s, as one
#      Lustre client stream): the job's write phase, 1 MiB sequential write of SLOW_SIZE with
#      end_fsync, directly on the slow mount and through `pliant fs mount SLOWMNT ...
#      --fsync cache`. Reports both wall times and the speed-up (goal: median >= 3x over >= 5
#      runs, issue 32; DataWarp at NERSC 1.5-2.2x), then the unmount's flush time (`pliant fs unmount --json` flush_secs) apart.
#      Checks the data: md5 through the mount before the unmount = md5 in the slow file system's
#      directory after it.
#   c. Write-back throughput over time with 1 and 8 write-back threads (DataWarp's figure 11):
#      SLOW_SIZE written through the cache over the slow backing with --dirty-high 90% (nothing is
#      written back during the write), then `pliant fs unmount` in the background while
#      `pliant fs stat --json` is sampled every 0.25 s; the MB/s between samples goes to CSVs.
#      Twice: as one file, and as WB_FILES files written at once (round robin, 1 MiB at a time).
#      Why both: the kernel serialises writes to one file on a FUSE mount (the inode lock of
#      buffered writes), so on the slow file system one file takes one stream whatever the
#      threads; separate files add up, as in a stage-out of many ranks' files. The chart
#      docs/img/fs-writeback-threads.png (`pliant bench chart`) shows the WB_FILES case
#      (OUT/fs-writeback-threads-1file.png the other).
#   d. A markdown summary, printed and written to target/fs_fio.md.
#
# Usage
#   tools/bench/fs_fio.sh [--quick] [--size SIZE] [--slow-size SIZE] [--reps N] [--rand-secs S]
#                         [--wb-files N] [--parts abc] [--out DIR]
#   --size       data set of part a (default 1GiB; 512MiB, 2G, or a number of MiB)
#   --slow-size  data set of parts b and c (default 512MiB)
#   --reps       runs per measurement, the median is reported (default 3)
#   --rand-secs  length of each 4 KiB random-read run (default 10)
#   --wb-files   part c's second layout: the data set in this many files (default 8; 1: only one)
#   --parts      which parts to run (default abc; e.g. --parts c)
#   --out        where fio's JSON, the CSVs, the unmount reports and mount logs go
#                (default target/fs_fio)
#   --quick      a smoke run: 128MiB / 64MiB, 1 run, 3 s random reads; the chart goes to
#                OUT/fs-writeback-threads.png instead of docs/img
#   env: PLIANT_BIN (default target/release/pliant, not built here), WORK_BASE (default /var/tmp:
#   where the backing, cache and slow directories live; it must be a local disk)
#
# Needs root (drop_caches, FUSE mounts), fio (apt-get install -y fio), python3. Touches nothing
# off this machine. Every mount and process it starts is stopped (by its own pid) at exit, and the
# work directory is removed.

set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/fs_mount.sh
ROOT=$PWD

usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; }

SIZE_MIB=1024
SLOW_MIB=512
REPS=3
RAND_SECS=10
WB_FILES=8
PARTS=abc
OUT=target/fs_fio
QUICK=0
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=1; SIZE_MIB=128; SLOW_MIB=64; REPS=1; RAND_SECS=3 ;;
        --size) SIZE_MIB=$(size_mib "$2"); shift ;;
        --slow-size) SLOW_MIB=$(size_mib "$2"); shift ;;
        --reps) REPS=$2; shift ;;
        --rand-secs) RAND_SECS=$2; shift ;;
        --wb-files) WB_FILES=$2; shift ;;
        --parts) PARTS=$2; shift ;;
        --out) OUT=$2; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

BIN=${PLIANT_BIN:-target/release/pliant}
[ -x "$BIN" ] || { echo "fs_fio.sh: no $BIN (cargo build --release, or set PLIANT_BIN)" >&2; exit 1; }
BIN=$(realpath "$BIN")
HELP=$ROOT/tools/bench/fs_fio.py
for t in fio python3 mountpoint; do
    command -v $t >/dev/null || { echo "fs_fio.sh: needs $t (apt-get install -y fio)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "fs_fio.sh: needs root (drop_caches, FUSE mounts)" >&2; exit 1; }

rm -rf "$OUT/logs"  # the summary counts WARN lines in these: only this run's
mkdir -p "$OUT/logs"
OUT=$(realpath "$OUT")
CHART=$ROOT/docs/img/fs-writeback-threads.png
[ $QUICK = 1 ] && CHART=$OUT/fs-writeback-threads.png
SUMMARY=$ROOT/target/fs_fio.md
WORK=$(mktemp -d "${WORK_BASE:-/var/tmp}/fs_fio.XXXXXX")
LOCAL=$WORK/local      # part a's backing directory
SLOWDIR=$WORK/slowdir  # what the slow file system serves
SLOWMNT=$WORK/slowmnt  # the slow file system
MNT=$WORK/mnt          # the pliant mount
CACHE=$WORK/cache      # its cache directory (same disk as LOCAL)
mkdir -p "$LOCAL" "$SLOWDIR" "$SLOWMNT" "$MNT"

# ---- processes and mounts, stopped at exit -------------------------------------------------

DAEMON_PID=   # the pliant mount daemon serving $MNT, while mounted
SLOW_PID=     # `pliant bench slow-fs`, while running

cleanup() {
    local rc=$?
    set +e
    # The pliant mount first: it may sit on the slow file system.
    stop_fs_mount
    if [ -n "$SLOW_PID" ] && kill -0 "$SLOW_PID" 2>/dev/null; then
        kill -TERM "$SLOW_PID"; wait_gone "$SLOW_PID" 20 || kill -KILL "$SLOW_PID"
        wait "$SLOW_PID" 2>/dev/null
    fi
    mountpoint -q "$SLOWMNT" && umount -l "$SLOWMNT"
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
# Seconds between two `now`s: elapsed T0 T1
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
stat_json() { "$BIN" fs stat "$MNT" --json; }
stat_field() { stat_json | python3 "$HELP" get - "$1" 0; }  # 0: a counter this pliant lacks

# pl_mount BACKING CAPACITY_MIB NAME [pliant fs mount options...]: mounts BACKING at $MNT with a
# fresh cache directory. NAME is what its log is kept as.
pl_mount() {
    local backing=$1 cap=$2; MOUNT_NAME=$3; shift 3
    rm -rf "$CACHE"
    local out
    out=$("$BIN" fs mount "$backing" "$MNT" --cache-dir "$CACHE" --capacity "${cap}MiB" \
        --max-file-size "${cap}MiB" "$@")
    DAEMON_PID=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
    [ -n "$DAEMON_PID" ] || { echo "fs_fio.sh: mount said: $out" >&2; exit 1; }
}

# pl_unmount REPORT_JSON [--discard]: writes everything back (or, with --discard, drops what
# is dirty) and unmounts (bounded: 15 min), keeps the log.
pl_unmount() {
    timeout 900 "$BIN" fs unmount "$MNT" --json ${2:-} >"$1"
    wait_gone "$DAEMON_PID" 60 || { echo "fs_fio.sh: daemon $DAEMON_PID still running" >&2; exit 1; }
    DAEMON_PID=
    cp "$CACHE/mount.log" "$OUT/logs/$MOUNT_NAME.log"
    rm -rf "$CACHE"
}

# settle FIELD SECONDS TRIES WHAT: waits until the mount's counter FIELD (`pliant fs stat`) is
# unchanged over SECONDS, at most TRIES times, or says WHAT is still running. Before measured
# reads: write-back the write started (writeback_bytes) must not compete with them, and the
# copy-up behind a cold read (copy_up_bytes: a cold read is answered from the backing file while
# its extents copy up behind it) must have ended before the warm read that should find them.
settle() {
    local field=$1 secs=$2 tries=$3 what=$4 last=-1 cur i
    for ((i = 0; i < tries; i++)); do
        cur=$(stat_field "$field")
        [ "$cur" = "$last" ] && return 0
        last=$cur
        sleep "$secs"
    done
    echo "fs_fio.sh: $what still running after $(awk -v s="$secs" -v n="$tries" 'BEGIN { print s * n }') s" >&2
}

# slow_start: `pliant bench slow-fs SLOWDIR SLOWMNT` at 50 MB/s per stream, in the background.
slow_start() {
    "$BIN" bench slow-fs "$SLOWDIR" "$SLOWMNT" --stream-rate 50MB --threads 16 \
        >"$OUT/logs/slow-fs.log" 2>&1 &
    SLOW_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        mountpoint -q "$SLOWMNT" && return 0
        kill -0 "$SLOW_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "fs_fio.sh: the slow file system did not mount (see $OUT/logs/slow-fs.log)" >&2
    exit 1
}

slow_stop() {
    kill -TERM "$SLOW_PID"
    wait_gone "$SLOW_PID" 30 || kill -KILL "$SLOW_PID"
    wait "$SLOW_PID" 2>/dev/null || true
    SLOW_PID=
    umount "$SLOWMNT" 2>/dev/null || true
}

# fio_run NAME DIR RW BS MIB [fio options...]: one fio job on DIR/fio.dat; JSON to OUT/NAME.json;
# prints "BW_BYTES_PER_S IOPS RUNTIME_MS". fallocate=none: the same file creation everywhere.
# FIO_FILE names another file.
fio_run() {
    local name=$1 dir=$2 rw=$3 bs=$4 size=$5; shift 5
    fio --name="$name" --directory="$dir" --filename="${FIO_FILE:-fio.dat}" --rw="$rw" --bs="$bs" \
        --size="${size}m" --ioengine=psync --direct=0 --fallocate=none "$@" \
        --output-format=json --output="$OUT/$name.json"
    python3 "$HELP" fio "$OUT/$name.json"
}
mbps() { calc "$1 / 1e6" 1; }

part() { [[ $PARTS == *$1* ]]; }
# Reads FILE once, unmeasured. On this VM the first read of a file after it was written is much
# slower than the next ones, page cache dropped or not (host-side caching of the virtual disk,
# most likely): 415-555 MB/s, then 815-1588 MB/s, whether 0, 5 or 10 s after the fsync. So every
# measured sequential read, direct or not, is a second read.
preread() { sync; echo 3 >/proc/sys/vm/drop_caches; cat "$1" >/dev/null; }
med() { python3 "$HELP" median "$@"; }
# Overhead: how much slower through the mount, in % of direct.
overhead() { calc "($1 - $2) / $1 * 100" 1; }
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- a. local backing: direct vs through the mount -----------------------------------------

# By default a pliant mount reads fully cached files through FUSE passthrough (the kernel reads
# the cache file itself); --no-passthrough (if this pliant has it) sends reads through the daemon.
NOPT=()
"$BIN" fs mount --help | grep -q -- '--no-passthrough' && NOPT=(--no-passthrough)
# An ordinary user's mount writes through the kernel's write cache; --direct-io (if this pliant
# has it) writes with no page cache, for jobs writing in large blocks.
DIO=()
"$BIN" fs mount --help | grep -q -- '--direct-io' && DIO=(--direct-io)
# The kernel sends reads through its page cache in requests of at most the mount's read-ahead
# (128 KiB unless root raises it): --kernel-read-ahead (if this pliant has it) measures the warm
# read through the daemon with the size the docs suggest, as an administrator would set it.
KRA=()
"$BIN" fs mount --help | grep -q -- '--kernel-read-ahead' && KRA=(--kernel-read-ahead 4MiB)

# uw_write NAME [options...]: the 1 MiB write + end_fsync through a fresh mount without
# passthrough (as an ordinary user's), nothing written back inside it (--dirty-high 90% of a
# capacity twice the file; the write window far above the file: `fs_write.sh` does the same);
# prints MB/s. The unmount drops the data: the write-back is not what this measures.
uw_write() {
    local name=$1 out bw wb; shift
    rm -f "$LOCAL/fio.dat"
    pl_mount "$LOCAL" $((SIZE_MIB * 2)) "$name" "${NOPT[@]}" --dirty-high 90% --dirty-low 70% \
        --write-window-multiplier 1000 "$@"
    out=$(fio_run "$name" "$MNT" write 1m "$SIZE_MIB" --end_fsync=1)
    read -r bw _ _ <<<"$out"
    wb=$(stat_field writeback_bytes)
    [ "$wb" = 0 ] || echo "fs_fio.sh: $name: $((wb >> 20)) MiB written back during the measured write" >&2
    pl_unmount "$OUT/$name-unmount.json" --discard
    rm -f "$LOCAL/fio.dat"
    mbps "$bw"
}

# What served the reads since the last call: "passthrough opens +N, daemon hits X MiB, copied up Y MiB"
read_counters() { echo "$(stat_field passthrough_opens) $(stat_field read_hit_bytes) $(stat_field copy_up_bytes)"; }
read_delta() {
    local a b
    read -r -a a <<<"$1"; read -r -a b <<<"$2"
    echo "passthrough opens +$((b[0] - a[0])), daemon hits $(((b[1] - a[1]) >> 20)) MiB, copied up $(((b[2] - a[2]) >> 20)) MiB"
}

if part a; then
    echo "== a. local backing, ${SIZE_MIB} MiB, $REPS runs each (page cache dropped before each measured read)"
    declare -a a_dw a_dr a_drr a_mw a_mr a_mrr a_hit a_cold a_nr a_nrr a_nhit a_wb a_uw a_uwd a_nra
    for ((r = 1; r <= REPS; r++)); do
        # Directly on the backing directory.
        rm -f "$LOCAL/fio.dat"
        out=$(fio_run "a-direct-write-$r" "$LOCAL" write 1m "$SIZE_MIB" --end_fsync=1)
        read -r bw _ _ <<<"$out"; a_dw+=("$(mbps "$bw")")
        preread "$LOCAL/fio.dat"
        drop_caches
        out=$(fio_run "a-direct-read-$r" "$LOCAL" read 1m "$SIZE_MIB")
        read -r bw _ _ <<<"$out"; a_dr+=("$(mbps "$bw")")
        drop_caches
        out=$(fio_run "a-direct-randread-$r" "$LOCAL" randread 4k "$SIZE_MIB" --runtime="$RAND_SECS" --time_based)
        read -r _ iops _ <<<"$out"; a_drr+=("$iops")
        rm -f "$LOCAL/fio.dat"

        # Through the mount (defaults): the file written through it stays cached, so the reads are warm.
        # The file is half the capacity and write-back starts only above 90% dirty: nothing is
        # written back while the write is measured, so the disk is not written twice in it.
        pl_mount "$LOCAL" $((SIZE_MIB * 2)) "a-$r" --dirty-high 90% --dirty-low 70%
        out=$(fio_run "a-mount-write-$r" "$MNT" write 1m "$SIZE_MIB" --end_fsync=1)
        read -r bw _ _ <<<"$out"; a_mw+=("$(mbps "$bw")")
        wb=$(stat_field writeback_bytes)
        [ "$wb" = 0 ] || echo "fs_fio.sh: run $r: $((wb >> 20)) MiB written back during the measured write" >&2
        a_wb+=("$((wb >> 20))")
        settle writeback_bytes 2 150 write-back  # none is expected (see above); should any have started, it ends before the reads
        preread "$MNT/fio.dat"
        c0=$(read_counters)
        drop_caches
        out=$(fio_run "a-mount-read-$r" "$MNT" read 1m "$SIZE_MIB")
        read -r bw _ _ <<<"$out"; a_mr+=("$(mbps "$bw")")
        a_hit+=("$(read_delta "$c0" "$(read_counters)")")
        drop_caches
        out=$(fio_run "a-mount-randread-$r" "$MNT" randread 4k "$SIZE_MIB" --runtime="$RAND_SECS" --time_based)
        read -r _ iops _ <<<"$out"; a_mrr+=("$iops")
        pl_unmount "$OUT/a-unmount-$r.json"

        # Through a fresh mount with reads through the daemon: the first read copies the file up
        # (cold), the second is warm.
        # The backing file was just written back by the unmount: read once first, as the direct
        # read's file was (see preread), so both compare second reads of the backing file.
        preread "$LOCAL/fio.dat"
        pl_mount "$LOCAL" $((SIZE_MIB * 2)) "a-daemon-$r" "${NOPT[@]}"
        drop_caches
        out=$(fio_run "a-daemon-coldread-$r" "$MNT" read 1m "$SIZE_MIB")
        read -r bw _ _ <<<"$out"; a_cold+=("$(mbps "$bw")")
        settle copy_up_bytes 0.5 120 copy-up
        c0=$(read_counters)
        drop_caches
        out=$(fio_run "a-daemon-read-$r" "$MNT" read 1m "$SIZE_MIB")
        read -r bw _ _ <<<"$out"; a_nr+=("$(mbps "$bw")")
        a_nhit+=("$(read_delta "$c0" "$(read_counters)")")
        drop_caches
        out=$(fio_run "a-daemon-randread-$r" "$MNT" randread 4k "$SIZE_MIB" --runtime="$RAND_SECS" --time_based)
        read -r _ iops _ <<<"$out"; a_nrr+=("$iops")
        pl_unmount "$OUT/a-daemon-unmount-$r.json"
        if [ ${#KRA[@]} -gt 0 ]; then
            # The same warm read with the larger kernel read-ahead: copied up by an unmeasured read first.
            pl_mount "$LOCAL" $((SIZE_MIB * 2)) "a-daemon-ra-$r" "${NOPT[@]}" "${KRA[@]}"
            cat "$MNT/fio.dat" >/dev/null
            settle copy_up_bytes 0.5 120 copy-up
            drop_caches
            out=$(fio_run "a-daemon-ra-read-$r" "$MNT" read 1m "$SIZE_MIB")
            read -r bw _ _ <<<"$out"; a_nra+=("$(mbps "$bw")")
            pl_unmount "$OUT/a-daemon-ra-unmount-$r.json"
            echo "run $r: warm read through the daemon with ${KRA[*]}: ${a_nra[-1]} MB/s"
        fi
        rm -f "$LOCAL/fio.dat"
        if [ ${#NOPT[@]} -gt 0 ]; then
            a_uw+=("$(uw_write "a-uw-write-$r")")
            [ ${#DIO[@]} -gt 0 ] && a_uwd+=("$(uw_write "a-uw-dio-write-$r" "${DIO[@]}")")
        fi
        if [ ${#a_uw[@]} -gt 0 ]; then
            dio=""
            [ ${#a_uwd[@]} -gt 0 ] && dio=", with --direct-io ${a_uwd[-1]} MB/s"
            echo "run $r: write through a mount without passthrough ${a_uw[-1]} MB/s$dio"
        fi
        echo "run $r (direct / mount / mount ${NOPT[*]:-again}): write ${a_dw[-1]} / ${a_mw[-1]} MB/s;" \
            "read ${a_dr[-1]} / ${a_mr[-1]} / ${a_nr[-1]} MB/s (cold ${a_cold[-1]});" \
            "4k randread ${a_drr[-1]} / ${a_mrr[-1]} / ${a_nrr[-1]} IOPS"
        echo "    warm read through the mount: ${a_hit[-1]}; through the daemon: ${a_nhit[-1]};" \
            "written back during the measured write: ${a_wb[-1]} MiB"
    done
    A_DW=$(med "${a_dw[@]}"); A_MW=$(med "${a_mw[@]}")
    A_DR=$(med "${a_dr[@]}"); A_MR=$(med "${a_mr[@]}"); A_NR=$(med "${a_nr[@]}"); A_COLD=$(med "${a_cold[@]}")
    A_DRR=$(med "${a_drr[@]}"); A_MRR=$(med "${a_mrr[@]}"); A_NRR=$(med "${a_nrr[@]}")
fi

# ---- b. slow backing: the job's write phase -------------------------------------------------

if part b || part c; then slow_start; fi
if part b; then
    echo "== b. slow backing (50 MB/s per stream), ${SLOW_MIB} MiB, $REPS runs"
    declare -a b_d b_m b_f b_dirty b_drain b_ok
    for ((r = 1; r <= REPS; r++)); do
        rm -f "$SLOWDIR/fio.dat"
        t0=$(now)
        fio_run "b-direct-write-$r" "$SLOWMNT" write 1m "$SLOW_MIB" --end_fsync=1 >/dev/null
        b_d+=("$(elapsed "$t0" "$(now)")")
        rm -f "$SLOWDIR/fio.dat"

        pl_mount "$SLOWMNT" $((SLOW_MIB * 2)) "b-$r" --fsync cache
        t0=$(now)
        fio_run "b-mount-write-$r" "$MNT" write 1m "$SLOW_MIB" --end_fsync=1 >/dev/null
        t1=$(now)
        b_m+=("$(elapsed "$t0" "$t1")")
        sum_mount=$(md5sum <"$MNT/fio.dat" | cut -d' ' -f1)
        pl_unmount "$OUT/b-unmount-$r.json"
        # From the end of the write phase until the data is all in the backing (md5 read included).
        b_drain+=("$(elapsed "$t1" "$(now)")")
        v=$(python3 "$HELP" get "$OUT/b-unmount-$r.json" flush_secs); b_f+=("$(calc "$v" 3)")
        v=$(python3 "$HELP" get "$OUT/b-unmount-$r.json" dirty_bytes_at_start); b_dirty+=("$((v >> 20))")
        # The slow file system's own directory holds what went through it.
        sum_back=$(md5sum <"$SLOWDIR/fio.dat" | cut -d' ' -f1)
        if [ "$sum_mount" = "$sum_back" ]; then b_ok+=(ok); else b_ok+=(MISMATCH); fi
        rm -f "$SLOWDIR/fio.dat"
        echo "run $r: write phase ${b_d[-1]} s direct, ${b_m[-1]} s through the cache;" \
            "flush ${b_f[-1]} s (${b_dirty[-1]} MiB dirty at unmount); md5 $sum_mount / $sum_back ${b_ok[-1]}"
    done
    B_D=$(med "${b_d[@]}"); B_M=$(med "${b_m[@]}"); B_F=$(med "${b_f[@]}")
    B_DRAIN=$(med "${b_drain[@]}"); B_DIRTY=$(med "${b_dirty[@]}")
    B_SPEEDUP=$(calc "$B_D / $B_M" 2)
    B_OK=PASS
    for v in "${b_ok[@]}"; do [ "$v" = ok ] || B_OK=FAIL; done
fi

# ---- c. write-back throughput over time, 1 vs 8 threads ------------------------------------

# c_run FILES THREADS: writes SLOW_MIB through a mount over the slow backing in FILES files with
# --dirty-high 90% (nothing goes back during the write), then unmounts in the background while
# sampling writeback_bytes every 0.25 s. CSV: OUT/fs-writeback-${FILES}f-${THREADS}t.csv.
declare -A c_flush c_mean c_peak c_umean c_before
c_run() {
    local files=$1 th=$2 key="$1f-$2t" i
    pl_mount "$SLOWMNT" $((SLOW_MIB * 2)) "c-$key" --writeback-threads "$th" \
        --high 95% --dirty-high 90% --dirty-low 20%
    # One fio job over FILES files, switching file every 1 MiB (file_service_type=roundrobin), as
    # FILES ranks writing at once: their extents alternate in the dirty queue.
    fio --name="c-write-$key" --directory="$MNT" --nrfiles="$files" --file_service_type=roundrobin \
        --filesize=$((SLOW_MIB / files))m --size="${SLOW_MIB}m" --rw=write --bs=1m --ioengine=psync \
        --direct=0 --fallocate=none --end_fsync=1 --output-format=json --output="$OUT/c-write-$key.json"
    c_before[$key]=$(stat_field writeback_bytes)  # 0: nothing went back during the write
    local samples=$OUT/c-samples-$key.txt
    echo "0 ${c_before[$key]}" >"$samples"
    local t0 upid deadline wb
    t0=$(now)
    timeout 900 "$BIN" fs unmount "$MNT" --json >"$OUT/c-unmount-$key.json" &
    upid=$!
    # Until the unmount is done (bounded by its own 900 s timeout, and by ours).
    deadline=$(( $(date +%s) + 960 ))
    while kill -0 "$upid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
        # sed, not python: a sample should cost little next to 0.25 s
        wb=$(stat_json 2>/dev/null | sed -n 's/.*"writeback_bytes": *\([0-9]*\).*/\1/p') || wb=
        if [ -n "$wb" ]; then echo "$(elapsed "$t0" "$(now)") $wb" >>"$samples"; fi
        sleep 0.25
    done
    wait "$upid"
    # The last interval: up to the end of the flush (flush_secs, from the unmount's own start),
    # with the counter as the flush left it.
    echo "$(python3 "$HELP" get "$OUT/c-unmount-$key.json" flush_secs)" \
        "$(python3 "$HELP" get "$OUT/c-unmount-$key.json" stats.writeback_bytes)" >>"$samples"
    wait_gone "$DAEMON_PID" 60 || { echo "fs_fio.sh: daemon $DAEMON_PID still running" >&2; exit 1; }
    DAEMON_PID=
    cp "$CACHE/mount.log" "$OUT/logs/$MOUNT_NAME.log"
    rm -rf "$CACHE" "$SLOWDIR"/c-write-*
    local dirty out peak mean n
    c_flush[$key]=$(calc "$(python3 "$HELP" get "$OUT/c-unmount-$key.json" flush_secs)" 3)
    dirty=$(python3 "$HELP" get "$OUT/c-unmount-$key.json" dirty_bytes_at_start)
    c_umean[$key]=$(calc "$dirty / ${c_flush[$key]} / 1e6" 1)
    out=$(python3 "$HELP" rates "$samples" "$OUT/fs-writeback-$key.csv")
    read -r peak mean n <<<"$out"
    c_peak[$key]=$peak; c_mean[$key]=$mean
    echo "$files file(s), $th thread(s): $((dirty >> 20)) MiB written back in ${c_flush[$key]} s" \
        "(${c_umean[$key]} MB/s; sampled mean $mean, peak $peak MB/s, $n samples)"
}

if part c; then
    echo "== c. write-back of ${SLOW_MIB} MiB to the slow backing, 1 vs 8 threads, in 1 file and in $WB_FILES files"
    C_LAYOUTS=(1)
    [ "$WB_FILES" -gt 1 ] && C_LAYOUTS+=("$WB_FILES")
    for files in "${C_LAYOUTS[@]}"; do
        for th in 1 8; do c_run "$files" "$th"; done
    done
    mkdir -p "$(dirname "$CHART")"
    chart() { # chart FILES OUT
        local what="$1 files"
        [ "$1" = 1 ] && what="one file"
        "$BIN" bench chart "1 thread=$OUT/fs-writeback-$1f-1t.csv" "8 threads=$OUT/fs-writeback-$1f-8t.csv" \
            --out "$2" --title "pliant fs: write-back of ${SLOW_MIB} MiB ($what) to a 50 MB/s-per-stream backing" \
            --x-label "seconds since unmount began" --y-label "MB/s written back"
    }
    chart "${C_LAYOUTS[-1]}" "$CHART"
    [ "${#C_LAYOUTS[@]}" -gt 1 ] && chart 1 "$OUT/fs-writeback-threads-1file.png"
fi

if [ -n "$SLOW_PID" ]; then slow_stop; fi

# ---- d. summary -----------------------------------------------------------------------------

# Lines in the mount logs at ERROR or WARN level.
log_errors=$(cat "$OUT"/logs/*.log | grep -c -E 'ERROR|panick' || true)
log_warns=$(cat "$OUT"/logs/*.log | grep -c 'WARN' || true)
verdict() { awk -v v="$1" -v g="$2" -v op="$3" 'BEGIN { ok = (op == "le") ? v <= g : v >= g; print ok ? "met" : "MISSED" }'; }
join() { local out; printf -v out '%s, ' "$@"; echo "${out%, }"; }
# pairs A B: the arrays named A and B, run by run, B/A (see fs_fio.py pairs).
pairs() { local -n pa=$1 pb=$2; python3 "$HELP" pairs "${pa[*]}" "${pb[*]}"; }
daemon_label="through pliant, reads through the daemon (${NOPT[*]:-this pliant has no --no-passthrough: same as the default})"

{
    echo "# pliant fs: fio ($(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc) CPUs)"
    echo
    echo "fio psync, direct=0, one job. Medians of $REPS runs (each run in brackets). The kernel page"
    echo "cache is dropped (\`sync; echo 3 > /proc/sys/vm/drop_caches\`) before every measured read"
    echo "phase, so reads come from disk (the cache directory or the backing directory), not RAM."
    echo "Each measured 1 MiB read (direct or not) is the file's second read since it was written (the"
    echo "first, unmeasured or the cold one, is much slower on this VM either way)."
    echo "Load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    if part a; then
        echo "## a. Local backing, ${SIZE_MIB} MiB file, cache capacity $((SIZE_MIB * 2)) MiB on the same disk"
        echo
        echo "Pairs: each run's figure through pliant over the direct figure of the same run (they run"
        echo "next to each other), median (min-max) over the runs."
        echo
        echo "| | direct | through pliant (defaults) | overhead | pairs | goal |"
        echo "|---|---:|---:|---:|---:|---|"
        echo "| 1 MiB seq write + end_fsync, MB/s | $A_DW [$(join "${a_dw[@]}")] | $A_MW [$(join "${a_mw[@]}")] | $(overhead "$A_DW" "$A_MW")% | $(pairs a_dw a_mw) | |"
        echo "| 1 MiB seq read, warm, MB/s | $A_DR [$(join "${a_dr[@]}")] | $A_MR [$(join "${a_mr[@]}")] | $(overhead "$A_DR" "$A_MR")% | $(pairs a_dr a_mr) | <= 10% (DataWarp 2.1-2.2%): $(verdict "$(overhead "$A_DR" "$A_MR")" 10 le) |"
        echo "| 4 KiB random read, IOPS (${RAND_SECS} s runs) | $A_DRR [$(join "${a_drr[@]}")] | $A_MRR [$(join "${a_mrr[@]}")] | $(overhead "$A_DRR" "$A_MRR")% | $(pairs a_drr a_mrr) | |"
        echo
        echo "| | direct | $daemon_label | overhead | pairs | goal |"
        echo "|---|---:|---:|---:|---:|---|"
        echo "| 1 MiB seq read, cold (copied up behind it), MB/s | $A_DR | $A_COLD [$(join "${a_cold[@]}")] | $(overhead "$A_DR" "$A_COLD")% | $(pairs a_dr a_cold) | <= 30%: $(verdict "$(overhead "$A_DR" "$A_COLD")" 30 le) |"
        echo "| 1 MiB seq read, warm, MB/s | $A_DR | $A_NR [$(join "${a_nr[@]}")] | $(overhead "$A_DR" "$A_NR")% | $(pairs a_dr a_nr) | <= 10%: $(verdict "$(overhead "$A_DR" "$A_NR")" 10 le) |"
        echo "| 4 KiB random read, IOPS | $A_DRR | $A_NRR [$(join "${a_nrr[@]}")] | $(overhead "$A_DRR" "$A_NRR")% | $(pairs a_drr a_nrr) | |"
        if [ ${#a_nra[@]} -gt 0 ]; then
            A_NRA=$(med "${a_nra[@]}")
            echo "| 1 MiB seq read, warm, ${KRA[*]} (root's setting), MB/s | $A_DR | $A_NRA [$(join "${a_nra[@]}")] | $(overhead "$A_DR" "$A_NRA")% | $(pairs a_dr a_nra) | <= 10%: $(verdict "$(overhead "$A_DR" "$A_NRA")" 10 le) |"
        fi
        if [ ${#a_uw[@]} -gt 0 ]; then
            A_UW=$(med "${a_uw[@]}")
            echo "| 1 MiB seq write + end_fsync, the kernel's write cache (an ordinary user's mount), MB/s | $A_DW | $A_UW [$(join "${a_uw[@]}")] | $(overhead "$A_DW" "$A_UW")% | $(pairs a_dw a_uw) | pairs >= 0.90 |"
        fi
        if [ ${#a_uwd[@]} -gt 0 ]; then
            A_UWD=$(med "${a_uwd[@]}")
            echo "| 1 MiB seq write + end_fsync, --direct-io (no page cache), MB/s | $A_DW | $A_UWD [$(join "${a_uwd[@]}")] | $(overhead "$A_DW" "$A_UWD")% | $(pairs a_dw a_uwd) | pairs >= 0.90 |"
        fi
        echo
        echo "What served the measured warm reads (pliant fs stat before/after): defaults: $(join "${a_hit[@]}");"
        echo "through the daemon: $(join "${a_nhit[@]}")."
        echo
    fi
    if part b; then
        echo "## b. Slow backing (pliant bench slow-fs, 50 MB/s per stream), ${SLOW_MIB} MiB, --fsync cache"
        echo
        echo "| | direct on the slow mount | through pliant | speed-up | pairs (speed-up run by run) | goal |"
        echo "|---|---:|---:|---:|---:|---|"
        echo "| write phase (1 MiB seq + end_fsync), s | $B_D [$(join "${b_d[@]}")] | $B_M [$(join "${b_m[@]}")] | ${B_SPEEDUP}x | $(pairs b_m b_d)x | >= 3x (DataWarp 1.5-2.2x): $(verdict "$B_SPEEDUP" 3 ge) |"
        echo "| unmount flush (flush_secs), s | | $B_F [$(join "${b_f[@]}")] | |  |"
        echo "| dirty at unmount, MiB | | $B_DIRTY [$(join "${b_dirty[@]}")] | |  |"
        echo "| write end -> all in backing (md5 read + unmount), s | | $B_DRAIN [$(join "${b_drain[@]}")] | |  |"
        echo "| md5 through the mount = md5 in backing after unmount | | $B_OK [$(join "${b_ok[@]}")] | |  |"
        echo
    fi
    if part c; then
        echo "## c. Write-back of ${SLOW_MIB} MiB to the slow backing at unmount"
        echo
        echo "| files | write-back threads | flush_secs | MB/s (dirty / flush_secs) | sampled mean MB/s | peak MB/s (0.25 s) | written back during the write, B |"
        echo "|---:|---:|---:|---:|---:|---:|---:|"
        for files in "${C_LAYOUTS[@]}"; do
            for th in 1 8; do
                k=${files}f-${th}t
                echo "| $files | $th | ${c_flush[$k]} | ${c_umean[$k]} | ${c_mean[$k]} | ${c_peak[$k]} | ${c_before[$k]} |"
            done
        done
        echo
        for files in "${C_LAYOUTS[@]}"; do
            echo "- $files file(s): 8 threads flush $(calc "${c_flush[${files}f-1t]} / ${c_flush[${files}f-8t]}" 2)x faster than 1."
        done
        echo
        echo "Chart ($((${C_LAYOUTS[-1]})) file(s)): ${CHART#"$ROOT"/}."
        echo
    fi
    echo "Mount logs ($OUT/logs): $log_errors ERROR/panic lines, $log_warns WARN lines."
} | tee "$SUMMARY"
echo "(written to ${SUMMARY#"$ROOT"/}; raw results in $OUT)"
