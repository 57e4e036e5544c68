#!/usr/bin/env bash
# One cache for the whole job (issue 35, access_mode=striped): 3 `pliant fs server`s and 3
# striped `pliant fs mount`s on this machine, standing for a job's cache servers and three of
# its compute nodes, checked for correctness, speed, failures and access by another user.
#
# What it measures (every server has its own cache directory, every mount is its own process
# with its own mount point; all over one backing directory; loopback only)
#   1. Correctness. Three writers, one per mount, at once: (a) ONE shared file, disjoint ranges,
#      1 MiB-aligned in 1 MiB writes; (b) another shared file, ranges whose bounds are not
#      multiples of 4096, in writes of 65,521 bytes (a prime: pieces cross stripe boundaries
#      anywhere); (c) file per process, each mount its own file, aligned and unaligned. The
#      bytes depend on the file and the offset (fs_striped.py: a 1,048,573-byte pseudo-random
#      pattern), so a piece at the wrong offset shows. Then EVERY mount reads EVERY file whole
#      and compares; then teardown (the mounts unmounted, the servers stopped with SIGTERM,
#      which writes every dirty byte back) and every backing file's sha256 is compared with the
#      expected one. (d, e) The same with fio, one job per mount writing its range of one shared
#      file with verify=crc32c, 1 MiB blocks and 65,521-byte blocks; every mount then verifies
#      every range (verify_only), and the backing file after teardown. Goal: 0 mismatched
#      bytes, 0 failed fio runs. (f) 12 x PART files of 2 MiB + 1,234 bytes (three stripes, the
#      last only on one server), a third written through each mount, over a backing directory
#      behind FUSE (slow-fs at 10GB per stream: not throttled, but its metadata requests take a
#      round trip, as a parallel file system's do); after teardown (the three servers writing
#      back at once) every backing file must be whole.
#   2. Speed over a slow backing store (`pliant bench slow-fs`, every data request taking
#      bytes / RATE, so one stream moves RATE and concurrent streams add up, as Lustre clients'
#      streams): fio, 3 jobs (one per mount), 1 MiB writes, direct=1, end_fsync=1, disjoint
#      thirds of one shared file of SPEED (pre-sized with truncate, so that no fio job lays it
#      out again under the others). Write phase = fio's runtime (the longest job), before any
#      teardown. (a) the same 3 jobs on the slow mount directly, (b) through 3 servers whose
#      cache directories are on the local disk (capacity 2 x SPEED each, --dirty-high 90%:
#      nothing is written back during the phase; the teardown, whose unmounts have the servers
#      write everything back, is timed apart).
#      Goal (a)/(b) >= 2x (DataWarp at NERSC 1.5-2.2x). CPU: user+sys seconds of this run's
#      processes over each phase (fio's own figure; slow-fs, the servers and the mount daemons
#      from /proc/PID/stat), as cores; and the whole machine's busy cores (/proc/stat).
#      (c) each server's cache directory on a slow-fs of its own with the same RATE, each
#      serving CACHE_THREADS requests at once (default 1: a device of RATE bytes/s; with more,
#      concurrent streams add up on every device and three synchronous clients cannot tell
#      1 server from 3): SPEED2 through 3 servers vs through 1 server (the same 3 mounts, each
#      with --servers of one address). Goal: 3 servers >= 2x the aggregate MB/s of 1.
#   3. Failures. (a) An unreachable server: the mounts use --server-timeout 3s; one server is
#      stopped with SIGSTOP (by pid) and 4 KiB at the start of each of a file's first three
#      stripes is read through a mount, timed: the stopped server's stripe must give EIO in
#      about 3 s, the others must read; after SIGCONT all three must read again. (b) kill -9:
#      every mount writes its third of a file and fsyncs it (--fsync cache: journaled on the
#      servers; the backing file is checked to still lack it), one server is killed with -9
#      (by pid) and started again on the same cache directory and, if it can be had, the same
#      port (the mounts know the servers by address); then teardown: the backing file must hold
#      every fsync'ed byte (sha256). (c) Before the kill, 8 readers at once through every mount
#      (so each holds several connections to the server); once it is back, each mount opens
#      the file and reads 4 KiB of every stripe: the errors the application saw are counted
#      (goal 0: the server is back), then every mount reads the whole file twice.
#   4. Another local user (root only: a throwaway user, removed at exit) connects to a server's
#      port with a raw RESP client (fs_striped.py resp) and sends every FS.* command without
#      the secret, claiming uid 0: every one must be refused (NOAUTH); a wrong AUTH must be
#      refused (WRONGPASS); the secret file must be unreadable to them.
#   5. A markdown table (check, result, numbers) on stdout and in OUT/fs_striped.md; --json FILE
#      writes the rows and every number as JSON.
#
# How to read it: each row says PASS/FAIL (correctness, failures, access) or met/MISSED (the
# speed goals) and the numbers behind it. "mismatched bytes" counts bytes that differ from what
# was written, plus missing or extra bytes. The speed rows give fio's write-phase seconds and
# MB/s, the ratio, and the CPU used: the direct phase's processes must use well under the 2
# cores (the throttle, not the CPU, must be what limits it); "whole machine busy" includes
# whatever else runs on the machine. The script exits 1 if any row says FAIL.
#
# Usage
#   tools/bench/fs_striped.sh [--quick] [--part-size MIB] [--speed-size SIZE] [--speed2-size SIZE]
#                             [--rate R] [--cache-threads N] [--stripe SIZE] [--parts 1234] [--out DIR]
#                             [--json FILE]
#   --part-size    MiB each writer writes of each file in part 1 (default 32: 96 MiB files)
#   --speed-size   part 2 (a)/(b)'s shared file (default 2GiB)
#   --speed2-size  part 2 (c)'s shared file (default 768MiB)
#   --rate         slow-fs --stream-rate (default 30MB: per stream, bytes/s)
#   --cache-threads  requests each cache-directory slow-fs serves at once in 2 (c) (default 1)
#   --stripe       the mounts' stripe (default 1MiB, the mounts' default)
#   --parts        which parts to run (default 1234)
#   --out          logs, fio's JSON, the summary (default target/fs_striped)
#   --json FILE    the results as JSON
#   --quick        a smoke run (a minute or two): 8 MiB parts, 192 MiB / 96 MiB speed files
#   env: PLIANT_BIN (default: target/release/pliant, built with cargo build --release if
#   missing), WORK_BASE (default /var/tmp: where every directory lives; a local disk)
#
# Needs fio, python3, fuse3 (fusermount3) and /dev/fuse; root for part 4 (useradd, setpriv),
# skipped otherwise. Touches nothing off this machine: every server listens on 127.0.0.1 on a
# port it picked itself (:0) and reported. Every process is stopped by its own pid and every
# mount unmounted at exit, every wait is bounded, and the work directory is removed.

set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/lib/fs_mount.sh
ROOT=$PWD

usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; }

PART_MIB=32
SPEED_MIB=2048
SPEED2_MIB=768
RATE=30MB
CACHE_THREADS=1
STRIPE=1MiB
PARTS=1234
OUT=target/fs_striped
JSON_OUT=-
while [ $# -gt 0 ]; do
    case $1 in
        --quick) PART_MIB=8; SPEED_MIB=192; SPEED2_MIB=96 ;;
        --part-size) PART_MIB=$(size_mib "$2"); shift ;;
        --speed-size) SPEED_MIB=$(size_mib "$2"); shift ;;
        --speed2-size) SPEED2_MIB=$(size_mib "$2"); shift ;;
        --rate) RATE=$2; shift ;;
        --cache-threads) CACHE_THREADS=$2; shift ;;
        --stripe) STRIPE=$2; shift ;;
        --parts) PARTS=$2; shift ;;
        --out) OUT=$2; shift ;;
        --json) JSON_OUT=$2; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$JSON_OUT" = - ] || JSON_OUT=$(realpath -m "$JSON_OUT")

BIN=${PLIANT_BIN:-target/release/pliant}
if [ ! -x "$BIN" ]; then
    [ -z "${PLIANT_BIN:-}" ] || { echo "fs_striped.sh: PLIANT_BIN=$BIN is not executable" >&2; exit 1; }
    echo "fs_striped.sh: building $BIN" >&2
    cargo build --release --offline -p pliant >&2
fi
BIN=$(realpath "$BIN")
HELP=$ROOT/tools/bench/fs_striped.py
for t in fio python3 mountpoint timeout; do
    command -v $t >/dev/null || { echo "fs_striped.sh: needs $t (apt-get install -y fio fuse3)" >&2; exit 1; }
done
[ -e /dev/fuse ] || { echo "fs_striped.sh: needs /dev/fuse" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then
    command -v fusermount3 >/dev/null || { echo "fs_striped.sh: needs fusermount3 (apt-get install -y fuse3)" >&2; exit 1; }
fi
"$BIN" fs server --help >/dev/null 2>&1 || { echo "fs_striped.sh: $BIN has no 'fs server' (build it from issue 35's code)" >&2; exit 1; }

mkdir -p "$OUT"
OUT=$(realpath "$OUT")
rm -rf "$OUT/logs" && mkdir -p "$OUT/logs"
LOGS=$OUT/logs
WORK=$(mktemp -d "${WORK_BASE:-/var/tmp}/fs_striped.XXXXXX")
ROWS=$WORK/rows.tsv   # check, result, numbers
KV=$WORK/values.tsv   # key, JSON value
: >"$ROWS"; : >"$KV"
SECRET=$WORK/secret
head -c 24 /dev/urandom | base64 >"$SECRET"
chmod 600 "$SECRET"

# ---- processes and mounts, stopped at exit ---------------------------------------------------

declare -A SPID SADDR   # server name -> pid, address
declare -A MPID MDIR    # mount name -> daemon pid, mount point
declare -A SLOWPID SLOWMNT  # slow-fs name -> pid, mount point
BENCH_USER=

cleanup() {
    local rc=$?
    set +e
    local n
    for n in "${!MPID[@]}"; do mount_stop "$n" discard; done
    for n in "${!SPID[@]}"; do
        kill -CONT "${SPID[$n]}" 2>/dev/null
        server_stop "$n" 60 >/dev/null
    done
    for n in "${!SLOWPID[@]}"; do slow_stop "$n"; done
    if [ -n "$BENCH_USER" ]; then userdel "$BENCH_USER" 2>/dev/null; fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "fs_striped.sh: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$ROWS"; echo "  -> $1: $2 ($3)" >&2; }
val() { printf '%s\t%s\n' "$1" "$2" >>"$KV"; }
# jget JSON KEY: one field of a JSON text (strings as they are, the rest as JSON).
jget() {
    python3 -c 'import json,sys; v=json.loads(sys.argv[1])[sys.argv[2]]; print(v if isinstance(v, str) else json.dumps(v))' "$1" "$2"
}
part() { [[ $PARTS == *$1* ]]; }
verdict() { awk -v v="$1" -v g="$2" 'BEGIN { print (v >= g) ? "met" : "MISSED" }'; }
# The file's seed: any number, the same for every writer and reader of it.
seed() { cksum <<<"$1" | cut -d' ' -f1; }

# server_start NAME BACKING CACHE_DIR LISTEN CAPACITY_MIB [pliant fs server options...]
# Starts a cache server in the background and waits (at most 120 s: it first writes back what
# a killed predecessor journaled) for its JSON line; SPID[NAME], SADDR[NAME]; the JSON line in
# $WORK/server-NAME.json. Returns 1 (after reaping it) if it exits first, e.g. port taken.
server_start() {
    local name=$1 backing=$2 cache=$3 listen=$4 cap=$5 out=$WORK/server-$1.json i
    shift 5
    : >"$out"
    "$BIN" fs server "$backing" --cache-dir "$cache" --capacity "${cap}MiB" \
        --max-file-size "${cap}MiB" --listen "$listen" --secret-file "$SECRET" --json "$@" \
        >"$out" 2>>"$LOGS/server-$name.log" &
    SPID[$name]=$!
    for ((i = 0; i < 1200; i++)); do
        if [ -s "$out" ]; then
            SADDR[$name]=$(jget "$(head -1 "$out")" addr)
            return 0
        fi
        if ! kill -0 "${SPID[$name]}" 2>/dev/null; then
            wait "${SPID[$name]}" 2>/dev/null || true
            unset "SPID[$name]"
            return 1
        fi
        sleep 0.1
    done
    die "server $name did not report within 120 s (see $LOGS/server-$name.log)"
}

# server_stop NAME BOUND_S: SIGTERM (every dirty byte written back), waits at most BOUND_S,
# then SIGKILL. Prints the seconds it took; returns 1 if it had to be killed or failed.
server_stop() {
    local name=$1 pid=${SPID[$1]} t0 rc=0
    t0=$(now)
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$2"; then
        echo "fs_striped.sh: server $name (pid $pid) still running after $2 s: killed" >&2
        kill -KILL "$pid" 2>/dev/null; rc=1
    fi
    wait "$pid" 2>/dev/null || rc=1
    unset "SPID[$name]"
    elapsed "$t0" "$(now)"
    return $rc
}

# kill9 NAME: kill -9 the server, reaped.
kill9() {
    local pid=${SPID[$1]}
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    unset "SPID[$1]"
}

# mount_start NAME BACKING SERVERS [pliant fs mount options...]: a striped mount at
# $WORK/mnt-NAME (cache directory $WORK/mcache-NAME: a striped mount keeps only its lock there).
mount_start() {
    local name=$1 backing=$2 servers=$3 out
    shift 3
    MDIR[$name]=$WORK/mnt-$name
    mkdir -p "${MDIR[$name]}"
    out=$(timeout 120 "$BIN" fs mount "$backing" "${MDIR[$name]}" --cache-dir "$WORK/mcache-$name" \
        --servers "$servers" --secret-file "$SECRET" --stripe "$STRIPE" "$@" 2>&1) || die "mount $name: $out"
    MPID[$name]=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
    [ -n "${MPID[$name]}" ] || die "mount $name said: $out"
}

# mount_stop NAME [discard]: unmounts (bounded), keeps the daemon's log.
mount_stop() {
    local name=$1 mnt=${MDIR[$1]} pid=${MPID[$1]}
    local flag=()
    [ "${2:-}" = discard ] && flag=(--discard)
    if mountpoint -q "$mnt"; then
        timeout 120 "$BIN" fs unmount "${flag[@]}" "$mnt" >/dev/null 2>>"$LOGS/unmount-$name.log" \
            || umount -l "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
    fi
    if ! wait_gone "$pid" 30; then
        echo "fs_striped.sh: mount daemon $name (pid $pid) still running: killed" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if mountpoint -q "$mnt"; then umount -l "$mnt" 2>/dev/null || true; fi
    cp "$WORK/mcache-$name/mount.log" "$LOGS/mount-$name.log" 2>/dev/null || true
    rm -rf "$WORK/mcache-$name"
    unset "MPID[$name]"
}

# slow_start NAME REAL_DIR MOUNT_DIR THREADS [RATE]: `pliant bench slow-fs` at RATE per stream.
slow_start() {
    local name=$1 real=$2 mnt=$3 threads=$4 rate=${5:-$RATE} i
    mkdir -p "$real" "$mnt"
    "$BIN" bench slow-fs "$real" "$mnt" --stream-rate "$rate" --threads "$threads" \
        >"$LOGS/slow-fs-$name.log" 2>&1 &
    SLOWPID[$name]=$!
    SLOWMNT[$name]=$mnt
    for ((i = 0; i < 100; i++)); do
        mountpoint -q "$mnt" && return 0
        kill -0 "${SLOWPID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    die "slow-fs $name did not mount (see $LOGS/slow-fs-$name.log)"
}

slow_stop() {
    local pid=${SLOWPID[$1]} mnt=${SLOWMNT[$1]}
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 30 || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if mountpoint -q "$mnt"; then umount -l "$mnt" 2>/dev/null || true; fi
    unset "SLOWPID[$1]"
}

# servers_up N BACKING PREFIX CAP [options...]: servers s0..s(N-1), cache dirs PREFIX0...;
# SERVERS = their addresses, comma-separated.
servers_up() {
    local n=$1 backing=$2 prefix=$3 cap=$4 i
    shift 4
    SERVERS=
    for ((i = 0; i < n; i++)); do
        server_start "s$i" "$backing" "$prefix$i" 127.0.0.1:0 "$cap" "$@" || die "server s$i did not start"
        SERVERS+=${SERVERS:+,}${SADDR[s$i]}
    done
}

# mounts_up BACKING [options...]: mounts m0, m1, m2 of $SERVERS.
mounts_up() {
    local backing=$1 i
    shift
    for i in 0 1 2; do mount_start "m$i" "$backing" "$SERVERS" "$@"; done
}

# teardown: unmount every mount (a striped mount's unmount has every server write all its
# dirty data back first), then stop every server at once (SIGTERM: each writes back whatever
# is left; at most 900 s); TD_SECS = the seconds all that took. Not in a subshell: it forgets
# the pids it stopped.
teardown() {
    local n t0 rc=0
    t0=$(now)
    for n in "${!MPID[@]}"; do mount_stop "$n"; done
    for n in "${!SPID[@]}"; do kill -TERM "${SPID[$n]}"; done
    for n in "${!SPID[@]}"; do
        if ! wait_gone "${SPID[$n]}" 900; then
            echo "fs_striped.sh: server $n still writing back after 900 s: killed" >&2
            kill -KILL "${SPID[$n]}"; rc=1
        fi
        wait "${SPID[$n]}" 2>/dev/null || rc=1
        unset "SPID[$n]"
    done
    TD_SECS=$(elapsed "$t0" "$(now)")
    return $rc
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
pass_fail() { if [ "$1" = 0 ]; then echo PASS; else echo FAIL; fi; }

# ---- 1. correctness ---------------------------------------------------------------------------

if part 1; then
    PART=$((PART_MIB << 20))
    echo "== 1. correctness: 3 servers, 3 striped mounts, ${PART_MIB} MiB per writer per file" >&2
    BACK=$WORK/backing
    mkdir -p "$BACK"
    servers_up 3 "$BACK" "$WORK/cache1-" $((PART_MIB * 24))
    mounts_up "$BACK"
    # name -> "total length"; writers: "file mount offset length bs"
    declare -A LEN
    W=()
    # (a) shared, aligned
    LEN[shared-aligned.dat]=$((3 * PART))
    for k in 0 1 2; do W+=("shared-aligned.dat m$k $((k * PART)) $PART 1048576"); done
    # (b) shared, unaligned: bounds at k*PART + 1234*k - 7 (not multiples of 4096), 65,521-byte writes
    ULEN=$((3 * PART - 4099))
    LEN[shared-unaligned.dat]=$ULEN
    b1=$((PART + 1227)); b2=$((2 * PART + 2461))
    W+=("shared-unaligned.dat m0 0 $b1 65521" "shared-unaligned.dat m1 $b1 $((b2 - b1)) 65521"
        "shared-unaligned.dat m2 $b2 $((ULEN - b2)) 65521")
    # (c) file per process: each mount its own files, one aligned, one unaligned
    for k in 0 1 2; do
        LEN[fpp-aligned-$k.dat]=$PART
        LEN[fpp-unaligned-$k.dat]=$((PART - 999 * (k + 1)))
        W+=("fpp-aligned-$k.dat m$k 0 $PART 1048576" "fpp-unaligned-$k.dat m$k 0 ${LEN[fpp-unaligned-$k.dat]} 4000")
    done
    for group in shared-aligned shared-unaligned fpp; do
        t0=$(now)
        pids=()
        for w in "${W[@]}"; do
            read -r f m off len bs <<<"$w"
            [[ $f == $group* ]] || continue
            timeout 600 python3 "$HELP" write "${MDIR[$m]}/$f" "$off" "$len" "$bs" "$(seed "$f")" \
                >/dev/null 2>>"$LOGS/writers.log" &
            pids+=($!)
        done
        werr=0
        for p in "${pids[@]}"; do wait "$p" || werr=$((werr + 1)); done
        echo "   $group: 3 writers done in $(elapsed "$t0" "$(now)") s ($werr failed, see $LOGS/writers.log)" >&2
        val "c1_${group}_writer_failures" "$werr"
        [ "$werr" = 0 ] || row "1. $group: writers" "$(pass_fail 1)" "$werr of 3 writers failed"
    done
    # Every mount reads every file whole.
    declare -A BAD
    for f in "${!LEN[@]}"; do BAD[$f]=0; done
    readerr=()
    for f in $(printf '%s\n' "${!LEN[@]}" | sort); do
        for m in m0 m1 m2; do
            read -r bad first size < <(timeout 600 python3 "$HELP" check "${MDIR[$m]}/$f" "${LEN[$f]}" "$(seed "$f")")
            if [ "$bad" = -1 ]; then readerr+=("$m/$f: $first at $size"); bad=${LEN[$f]}; fi
            [ "$bad" = 0 ] || echo "   MISMATCH through $m: $f: $bad bytes, first at $first, size $size" >&2
            BAD[$f]=$((BAD[$f] + bad))
        done
    done
    # fio, one job per mount, with its own check (verify=crc32c: every block carries its offset
    # and a checksum): each job writes its range of one shared file; then every mount verifies
    # every range (verify_only), and after teardown the backing file is verified the same way.
    # Aligned: 1 MiB blocks; unaligned: 65,521-byte blocks (ranges start at multiples of it:
    # fio verifies blocks at multiples of bs from the range's start).
    declare -A FIO_BS FIO_PER FIO_BAD
    FIO_BS[fio-aligned.dat]=1048576; FIO_PER[fio-aligned.dat]=$PART
    FIO_BS[fio-unaligned.dat]=65521; FIO_PER[fio-unaligned.dat]=$((PART_MIB * 16 * 65521))
    fio_job() { # fio_job NAME DIR FILE K [options]: job K's range of FILE in DIR
        local name=$1 dir=$2 f=$3 k=$4
        shift 4
        timeout 600 fio --name="$name" --directory="$dir" --filename="$f" --rw=write \
            --bs="${FIO_BS[$f]}" --offset=$((k * FIO_PER[$f])) --size="${FIO_PER[$f]}" \
            --ioengine=psync --verify=crc32c --verify_state_save=0 --fallocate=none "$@" \
            --output-format=json --output="$OUT/$name.json" >/dev/null 2>>"$LOGS/fio-verify.log"
    }
    for f in fio-aligned.dat fio-unaligned.dat; do
        truncate -s $((3 * FIO_PER[$f])) "${MDIR[m0]}/$f"
        pids=()
        for k in 0 1 2; do fio_job "c1-${f%.dat}-write-$k" "${MDIR[m$k]}" "$f" "$k" --do_verify=0 & pids+=($!); done
        werr=0
        for p in "${pids[@]}"; do wait "$p" || werr=$((werr + 1)); done
        FIO_BAD[$f]=$werr
        for m in m0 m1 m2; do
            for k in 0 1 2; do
                fio_job "c1-${f%.dat}-verify-$m-$k" "${MDIR[$m]}" "$f" "$k" --verify_only \
                    || FIO_BAD[$f]=$((FIO_BAD[$f] + 1))
            done
        done
    done
    # Teardown: the servers write back; then the backing files.
    teardown || die "teardown failed"
    tsecs=$TD_SECS
    declare -A BBAD
    for f in "${!LEN[@]}"; do
        want=$(python3 "$HELP" sha "${LEN[$f]}" "$(seed "$f")")
        got=$(sha256sum <"$BACK/$f" | cut -d' ' -f1)
        if [ "$want" = "$got" ]; then BBAD[$f]=0; else
            read -r "BBAD[$f]" first size < <(python3 "$HELP" check "$BACK/$f" "${LEN[$f]}" "$(seed "$f")")
            echo "   MISMATCH in the backing file $f: ${BBAD[$f]} bytes, first at $first, size $size" >&2
        fi
    done
    for group in shared-aligned shared-unaligned fpp; do
        rb=0; bb=0; bytes=0; nf=0
        for f in "${!LEN[@]}"; do
            [[ $f == $group* ]] || continue
            rb=$((rb + BAD[$f])); bb=$((bb + BBAD[$f])); bytes=$((bytes + LEN[$f])); nf=$((nf + 1))
        done
        case $group in
            shared-aligned) what="(a) one shared file, 3 writers, disjoint 1 MiB-aligned thirds, 1 MiB writes" ;;
            shared-unaligned) what="(b) one shared file, 3 writers, unaligned bounds, 65,521-byte writes" ;;
            fpp) what="(c) file per process: 2 files per mount (1 MiB writes; 4,000-byte writes, unaligned sizes)" ;;
        esac
        row "1$what" "$(pass_fail $((rb + bb)))" \
            "$nf file(s), $((bytes >> 20)) MiB; mismatched bytes: $rb read through the 3 mounts (each reads all), $bb in the backing after teardown"
        val "c1_${group}_mismatch_mounts" "$rb"
        val "c1_${group}_mismatch_backing" "$bb"
    done
    declare -A FIO_BBAD
    for f in fio-aligned.dat fio-unaligned.dat; do
        FIO_BBAD[$f]=0
        for k in 0 1 2; do
            fio_job "c1-${f%.dat}-verify-backing-$k" "$BACK" "$f" "$k" --verify_only \
                || FIO_BBAD[$f]=$((FIO_BBAD[$f] + 1))
        done
        case $f in
            fio-aligned.dat) what="(d) fio, one job per mount, one shared file, 1 MiB blocks, verify=crc32c" ;;
            *) what="(e) fio, one job per mount, one shared file, 65,521-byte blocks (unaligned), verify=crc32c" ;;
        esac
        row "1$what" "$(pass_fail $((FIO_BAD[$f] + FIO_BBAD[$f])))" \
            "$((3 * FIO_PER[$f] >> 20)) MiB; failed fio runs: ${FIO_BAD[$f]} of 3 writes + 9 verify_only (3 ranges through each mount), ${FIO_BBAD[$f]} of 3 verify_only on the backing after teardown"
        val "c1_${f%.dat}_failed_runs" $((FIO_BAD[$f] + FIO_BBAD[$f]))
    done
    [ "${#readerr[@]}" = 0 ] || row "1. read errors" "$(pass_fail 1)" "$(IFS=';'; echo "${readerr[*]}")"
    val c1_teardown_secs "$tsecs"
    rm -rf "$BACK" "$WORK"/cache1-*

    # (f) Many files whose last stripe only one server holds, over a backing directory behind
    # FUSE (slow-fs at a rate that does not limit: its metadata requests take a round trip,
    # as on a parallel file system), all three servers writing back at once at teardown.
    MANY=$((PART_MIB * 12)); MSIZE=$(((2 << 20) + 1234))
    slow_start many "$WORK/many-real" "$WORK/many-mnt" 16 10GB
    servers_up 3 "${SLOWMNT[many]}" "$WORK/cache1f-" $((PART_MIB * 36)) --dirty-high 90% --dirty-low 70%
    mounts_up "${SLOWMNT[many]}"
    pids=()
    for k in 0 1 2; do
        timeout 600 python3 "$HELP" many write "${MDIR[m$k]}" $((k * MANY / 3)) $((MANY / 3)) "$MSIZE" \
            2>>"$LOGS/writers.log" & pids+=($!)
    done
    werr=0
    for p in "${pids[@]}"; do wait "$p" || werr=$((werr + 1)); done
    read -r mbad mfirst < <(timeout 600 python3 "$HELP" many check "${MDIR[m1]}" 0 "$MANY" "$MSIZE")
    teardown || die "teardown failed"
    read -r bbad bfirst < <(timeout 600 python3 "$HELP" many check "$WORK/many-real" 0 "$MANY" "$MSIZE")
    slow_stop many
    row "1(f) $MANY files of 2 MiB + 1,234 B (3 stripes, the last on one server) from 3 mounts, backing behind FUSE (slow-fs, unthrottled), the 3 servers writing back at once" \
        "$(pass_fail $((werr + mbad + bbad)))" \
        "files that differ: $mbad read through m1 (first: $mfirst), $bbad in the backing after teardown (first: $bfirst, name:size); $werr writers failed"
    val c1_many_bad_mount "$mbad"; val c1_many_bad_backing "$bbad"
    rm -rf "$WORK"/cache1f-* "$WORK/many-real"
fi

# ---- 2. speed over a slow backing store -----------------------------------------------------

# fio3 NAME FILE PER_MIB DIR0 DIR1 DIR2: 3 fio jobs (one process), job k writing the k-th
# PER_MIB of FILE in DIRk; the file is sized first. Prints "BYTES RUNTIME_MS MBPS FIO_CPU_S".
fio3() {
    local name=$1 file=$2 per=$3 k
    shift 3
    truncate -s $((3 * per))M "$1/$file"
    local args=()
    for k in 0 1 2; do
        args+=(--name="$name-$k" --directory="$1" --filename="$file" --rw=write --bs=1m
            --offset="$((k * per))m" --size="${per}m" --ioengine=psync --direct=1 --end_fsync=1
            --fallocate=none)
        shift
    done
    timeout 1800 fio --output-format=json --output="$OUT/$name.json" "${args[@]}" >/dev/null
    python3 "$HELP" fio "$OUT/$name.json"
}
cpu_now() { python3 "$HELP" cpu; }
# cores PAIR0 PAIR1: machine busy cores (of nproc) between two cpu_now (busy / wall seconds).
cores() {
    local b0 b1 t0 t1
    read -r b0 t0 <<<"$1"; read -r b1 t1 <<<"$2"
    calc "($b1 - $b0) / (($t1 - $t0) / $(nproc))" 2
}
proc_cpu() { python3 "$HELP" proc "$@"; }

if part 2; then
    PER=$((SPEED_MIB / 3))
    PER2=$((SPEED2_MIB / 3))
    echo "== 2. speed: slow-fs at $RATE per stream; 3 fio jobs of ${PER} MiB" >&2
    slow_start back "$WORK/slow-real" "$WORK/slow-mnt" 16
    SLOW=${SLOWMNT[back]}

    # (a) directly on the slow mount
    c0=$(cpu_now); p0=$(proc_cpu "${SLOWPID[back]}")
    read -r bytes ms d_mbps d_fiocpu < <(fio3 s2-direct speed-direct.dat "$PER" "$SLOW" "$SLOW" "$SLOW")
    d_secs=$(calc "$ms / 1000" 3)
    d_cores=$(cores "$c0" "$(cpu_now)")
    d_slowcpu=$(calc "$(proc_cpu "${SLOWPID[back]}") - $p0" 2)
    rm -f "$WORK/slow-real/speed-direct.dat"
    echo "   direct: $d_secs s, $d_mbps MB/s, machine busy $d_cores cores" >&2

    # (b) through 3 servers (local cache dirs) and 3 mounts
    servers_up 3 "$SLOW" "$WORK/cache2-" $((SPEED_MIB * 2)) --dirty-high 90% --dirty-low 70%
    mounts_up "$SLOW" --max-file-size "$((SPEED_MIB * 2))MiB"
    spids=("${SPID[@]}"); mpids=("${MPID[@]}")
    c0=$(cpu_now); ps0=$(proc_cpu "${spids[@]}"); pm0=$(proc_cpu "${mpids[@]}")
    read -r bytes ms c_mbps c_fiocpu < <(fio3 s2-cached speed.dat "$PER" "${MDIR[m0]}" "${MDIR[m1]}" "${MDIR[m2]}")
    c_secs=$(calc "$ms / 1000" 3)
    c_cores=$(cores "$c0" "$(cpu_now)")
    c_scpu=$(calc "$(proc_cpu "${spids[@]}") - $ps0" 2)
    c_mcpu=$(calc "$(proc_cpu "${mpids[@]}") - $pm0" 2)
    read -r c_dirty wb_before _ < <(timeout 60 python3 "$HELP" stats "$SECRET" "${SADDR[@]}")
    echo "   through 3 servers: $c_secs s, $c_mbps MB/s, machine busy $c_cores cores" >&2
    teardown || die "teardown failed"
    drain=$TD_SECS
    size_ok=$(stat -c %s "$WORK/slow-real/speed.dat")
    rm -f "$WORK/slow-real/speed.dat"; rm -rf "$WORK"/cache2-*
    ratio=$(calc "$d_secs / $c_secs" 2)
    row "2(a/b) write phase, 3 clients x ${PER} MiB of one shared file, 1 MiB direct writes + end_fsync, backing slow-fs $RATE/stream" \
        "$(verdict "$ratio" 2) (goal >= 2x)" \
        "direct on slow-fs $d_secs s ($d_mbps MB/s) vs through 3 servers $c_secs s ($c_mbps MB/s): ${ratio}x; CPU (user+sys s in the phase): direct fio $d_fiocpu + slow-fs $d_slowcpu = $(calc "($d_fiocpu + $d_slowcpu) / $d_secs") cores; cached fio $c_fiocpu + 3 servers $c_scpu + 3 mount daemons $c_mcpu = $(calc "($c_fiocpu + $c_scpu + $c_mcpu) / $c_secs") cores; whole machine busy $d_cores vs $c_cores cores of $(nproc) (other users' load included); teardown (unmounts, which have the servers write back, then the servers stopped) $drain s; at its end the servers held $((c_dirty >> 20)) MiB dirty and had written back $((wb_before >> 20)) MiB; backing size after $size_ok B"
    val s2_direct_secs "$d_secs"; val s2_direct_mbps "$d_mbps"; val s2_direct_busy_cores "$d_cores"
    val s2_cached_secs "$c_secs"; val s2_cached_mbps "$c_mbps"; val s2_cached_busy_cores "$c_cores"
    val s2_cached_server_cpu_secs "$c_scpu"; val s2_cached_mount_cpu_secs "$c_mcpu"
    val s2_speedup "$ratio"; val s2_teardown_secs "$drain"

    # (c) cache dirs on slow devices: 3 servers vs 1
    echo "== 2(c). cache directories on slow-fs ($RATE per stream, $CACHE_THREADS at once); ${PER2} MiB per client" >&2
    for i in 0 1 2; do slow_start "dev$i" "$WORK/dev$i-real" "$WORK/dev$i-mnt" "$CACHE_THREADS"; done
    declare -A S3
    for n in 3 1; do
        SERVERS=
        for ((i = 0; i < n; i++)); do
            server_start "s$i" "$SLOW" "$WORK/dev$i-mnt/cache" 127.0.0.1:0 $((SPEED2_MIB * 2)) \
                --dirty-high 90% --dirty-low 70% || die "server s$i did not start"
            SERVERS+=${SERVERS:+,}${SADDR[s$i]}
        done
        mounts_up "$SLOW" --max-file-size "$((SPEED2_MIB * 2))MiB"
        c0=$(cpu_now)
        read -r bytes ms mbps _ < <(fio3 "s2c-$n" "speed2-$n.dat" "$PER2" "${MDIR[m0]}" "${MDIR[m1]}" "${MDIR[m2]}")
        secs=$(calc "$ms / 1000" 3)
        S3[$n]="$secs $mbps $(cores "$c0" "$(cpu_now)")"
        echo "   $n server(s): $secs s, $mbps MB/s" >&2
        teardown || die "teardown failed"
        for ((i = 0; i < n; i++)); do rm -rf "$WORK/dev$i-mnt/cache"; done
        rm -f "$WORK/slow-real/speed2-$n.dat"
    done
    read -r s3 m3 k3 <<<"${S3[3]}"; read -r s1 m1 k1 <<<"${S3[1]}"
    r31=$(calc "$m3 / $m1" 2)
    row "2(c) aggregate write MB/s, 3 servers vs 1, each cache dir on its own slow-fs ($RATE/stream, $CACHE_THREADS request(s) at once), 3 clients x ${PER2} MiB" \
        "$(verdict "$r31" 2) (goal >= 2x)" \
        "3 servers $m3 MB/s ($s3 s, machine busy $k3 cores) vs 1 server $m1 MB/s ($s1 s, $k1 cores): ${r31}x"
    val s2c_3_mbps "$m3"; val s2c_1_mbps "$m1"; val s2c_ratio "$r31"
    for i in 0 1 2; do slow_stop "dev$i"; done
    slow_stop back
fi

# ---- 3. failures: an unreachable server, kill -9 ----------------------------------------------

if part 3 || part 4; then
    echo "== 3. failures" >&2
    BACK=$WORK/backing3
    mkdir -p "$BACK"
    servers_up 3 "$BACK" "$WORK/cache3-" $((PART_MIB * 12)) --dirty-high 90% --dirty-low 70%
    mounts_up "$BACK" --server-timeout 3s
fi
if part 4; then
    if [ "$(id -u)" = 0 ] && command -v useradd >/dev/null && command -v setpriv >/dev/null; then
        BENCH_USER=pliantbench$$
        useradd -M -N -s /usr/sbin/nologin "$BENCH_USER" 2>>"$LOGS/useradd.log" || die "useradd failed"
        uid=$(id -u "$BENCH_USER")
        as_user=(setpriv --reuid="$uid" --regid=65534 --clear-groups)
        # The system's python: a python3 on root's PATH (pyenv's shims) may be root's alone.
        py=/usr/bin/python3
        [ -x "$py" ] || py=$(command -v python3)
        replies=$(timeout 60 "${as_user[@]}" "$py" - resp "${SADDR[s0]}" <"$HELP") \
            || die "the raw client as $BENCH_USER failed: $replies"
        secret_read=no
        if "${as_user[@]}" cat "$SECRET" >/dev/null 2>&1; then secret_read=YES; fi
        res=$(python3 - "$replies" "$secret_read" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
bad = [k for k, v in d.items()
       if (k.startswith("AUTH") and not v.startswith("-WRONGPASS"))
       or (not k.startswith("AUTH") and not v.startswith("-NOAUTH"))]
if sys.argv[2] != "no":
    bad.append("the secret file is readable")
n = sum(1 for k in d if k.startswith("FS."))
print(len(bad), f"{n} FS.* commands claiming uid 0 and PING: "
      + ("all refused NOAUTH; AUTH with a wrong secret WRONGPASS; secret file unreadable"
         if not bad else "NOT refused: " + ", ".join(f"{k} -> {d.get(k)}" for k in bad)))
EOF
)
        row "4. another local user (uid $uid) on a server's port without the secret" \
            "$(pass_fail "${res%% *}")" "${res#* }"
        val s4_replies "$replies"
        userdel "$BENCH_USER" 2>/dev/null || true
        BENCH_USER=
    else
        row "4. another local user" "SKIPPED" "needs root (useradd, setpriv)"
    fi
fi
if part 3; then
    # (a) SIGSTOP: the first three stripes of a file written through m0, read through m1.
    f=eio.dat
    python3 "$HELP" write "${MDIR[m0]}/$f" 0 $((3 << 20)) 1048576 "$(seed "$f")" fsync >/dev/null
    out=$(timeout 120 python3 "$HELP" eio "${MDIR[m1]}/$f" $((1 << 20)) "${SPID[s2]}")
    echo "   SIGSTOP of s2: $out" >&2
    res=$(python3 - "$out" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
eio = [r for r in d["stopped"] if r[1] == "EIO"]
ok = [r for r in d["stopped"] if r[1] == "ok"]
after_ok = all(r[1] == "ok" for r in d["after"])
good = len(eio) == 1 and len(ok) == 2 and 2.0 <= eio[0][2] <= 6.0 and after_ok
print("0" if good else "1",
      f'stripe {eio[0][0] if eio else "-"} EIO after {eio[0][2] if eio else "-"} s;',
      f'the other stripes read in {", ".join(str(r[2]) for r in ok) or "-"} s;',
      "all 3 read again after SIGCONT" if after_ok else f'after SIGCONT: {d["after"]}')
EOF
)
    row "3(a) a server stopped (SIGSTOP), --server-timeout 3s: read of its stripe through a mount" \
        "$(pass_fail "${res%% *}") (EIO in 2-6 s, others read)" "${res#* }"
    val s3_eio "$out"

    # (b) kill -9 with fsync'ed dirty stripes
    f=fsynced.dat
    FL=$((3 * PART_MIB << 20))
    third=$((FL / 3))
    pids=()
    for k in 0 1 2; do
        python3 "$HELP" write "${MDIR[m$k]}/$f" $((k * third)) "$third" 1048576 "$(seed "$f")" fsync \
            >/dev/null 2>>"$LOGS/writers.log" &
        pids+=($!)
    done
    werr=0
    for p in "${pids[@]}"; do wait "$p" || werr=$((werr + 1)); done
    read -r before_bad _ _ < <(python3 "$HELP" check "$BACK/$f" "$FL" "$(seed "$f")")
    read -r dirty _ _ < <(timeout 60 python3 "$HELP" stats "$SECRET" "${SADDR[s1]}")
    # 8 readers at once through every mount: each mount then holds several connections to s1.
    for m in m0 m1 m2; do timeout 120 python3 "$HELP" warm "${MDIR[$m]}/$f" $((1 << 20)) 8; done
    addr=${SADDR[s1]}
    kill9 s1
    t0=$(now)
    same_port=yes
    if ! server_start s1 "$BACK" "$WORK/cache3-1" "$addr" $((PART_MIB * 12)) --dirty-high 90% --dirty-low 70%; then
        same_port=no
        server_start s1 "$BACK" "$WORK/cache3-1" 127.0.0.1:0 $((PART_MIB * 12)) --dirty-high 90% --dirty-low 70% \
            || die "s1 did not restart"
    fi
    restart=$(elapsed "$t0" "$(now)")
    recovered=$(jget "$(head -1 "$WORK/server-s1.json")" recovered)
    echo "   s1 restarted in $restart s on ${SADDR[s1]} (was $addr; same port: $same_port); recovered $recovered" >&2
    if [ "$same_port" = no ]; then
        row "3(b) restart of the killed server on its port" "NOTE" \
            "port of $addr not to be had: the mounts know servers by address, so they would have to be remounted with ${SADDR[s1]}"
        SERVERS=${SERVERS/$addr/${SADDR[s1]}}
        for m in m0 m1 m2; do mount_stop "$m"; done
        mounts_up "$BACK" --server-timeout 3s
    fi
    # What an application sees at once: open, and 4 KiB at every stripe, through every mount.
    probe_opens=0; probe_reads=0
    for m in m0 m1 m2; do
        read -r o r < <(timeout 120 python3 "$HELP" probe "${MDIR[$m]}/$f" $((1 << 20)))
        probe_opens=$((probe_opens + o)); probe_reads=$((probe_reads + r))
    done
    echo "   just after the restart: $probe_opens failed opens, $probe_reads failed reads" >&2
    # Then the whole file through every mount, twice.
    tries=()
    for attempt in 1 2; do
        r=
        for m in m0 m1 m2; do
            read -r bad first size < <(timeout 120 python3 "$HELP" check "${MDIR[$m]}/$f" "$FL" "$(seed "$f")")
            if [ "$bad" = -1 ]; then r+="$m $first; "; else r+="$m $bad bad; "; fi
        done
        tries+=("try $attempt: ${r%; }")
    done
    echo "   reads after the restart: ${tries[*]}" >&2
fi
if part 3 || part 4; then
    teardown || die "teardown failed"
    tsecs=$TD_SECS
fi
if part 3; then
    want=$(python3 "$HELP" sha "$FL" "$(seed "$f")")
    got=$(sha256sum <"$BACK/$f" | cut -d' ' -f1)
    if [ "$want" = "$got" ]; then after_bad=0; else
        read -r after_bad _ _ < <(python3 "$HELP" check "$BACK/$f" "$FL" "$(seed "$f")")
    fi
    row "3(b) kill -9 of a server holding fsync'ed dirty stripes, restarted on its cache dir" \
        "$(pass_fail $((after_bad + werr)))" \
        "$((FL >> 20)) MiB written by 3 mounts and fsync'ed ($werr writers failed); before the kill $before_bad bytes not yet in the backing file, the killed server held $dirty B dirty (FS.STATS); restart $restart s, same port: $same_port, recovered $recovered; mismatched bytes in the backing after teardown: $after_bad"
    row "3(c) the first requests through the mounts once the killed server is back (each mount had 8 readers before the kill)" \
        "$(pass_fail $((probe_opens + probe_reads)))" \
        "failed opens (each retried, up to 20 tries): $probe_opens; failed 4 KiB reads, one per stripe ($((FL >> 20)) stripes per mount): $probe_reads; whole-file reads after them: ${tries[*]}"
    val s3_after_restart_failed_opens "$probe_opens"; val s3_after_restart_failed_reads "$probe_reads"
    val s3_kill9_backing_mismatch "$after_bad"; val s3_restart_same_port "\"$same_port\""
    val s3_recovered "$recovered"
fi

# ---- 5. summary -------------------------------------------------------------------------------

log_errors=$(cat "$LOGS"/*.log 2>/dev/null | grep -c -E 'ERROR|panick' || true)
{
    echo "# pliant fs: striped cache, 3 servers, 3 mounts, stripe $STRIPE ($(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc) CPUs)"
    echo
    echo "Load average (1, 5, 15 min) at the start: $LOAD_START; at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    python3 "$HELP" report "$ROWS" "$KV" "$JSON_OUT"
    echo
    echo "Logs ($LOGS): $log_errors ERROR/panic lines (a stopped or killed server's EIO is logged as ERROR)."
} | tee "$OUT/fs_striped.md"
[ "$JSON_OUT" = - ] || echo "(JSON in $JSON_OUT)" >&2
FAILS=$(cut -f2 "$ROWS" | grep -c '^FAIL' || true)
[ "$FAILS" = 0 ] || { echo "fs_striped.sh: $FAILS check(s) FAILED" >&2; exit 1; }
