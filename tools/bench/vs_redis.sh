#!/usr/bin/env bash
# `pliant serve` against redis-server on this machine: throughput and memory per key.
#
# What it measures
#   Throughput: redis-benchmark (50 clients, 100-byte values, -t set,get, keys drawn at random
#   from KEYSPACE keys with -r so GET mostly hits keys the SET phase wrote) against
#     no store   `pliant serve --no-store`                       vs `redis-server --save '' --appendonly no`
#     persistent `pliant serve --store DIR --durability everysec` vs `redis-server --appendonly yes
#                                                                     --appendfsync everysec --save ''`
#   each at -P 1 (one request per round trip) and -P 16 (pipelined). N requests per -P 1 run,
#   N16 per -P 16 run (~2-5 s per phase for Redis on a 2-core box; a slower server takes longer,
#   e.g. pliant's persistent pipelined SET). The two servers run alternately, one at a time, ROUNDS
#   times; the order flips every round so slow drift on a shared machine hits both alike.
#   Memory: KEYS distinct keys ("key:%012d", 16 bytes) of 100-byte values piped as RESP SETs
#   through `redis-cli --pipe` into a fresh server without persistence; growth of VmRSS
#   (/proc/PID/status) divided by KEYS; DBSIZE must equal KEYS on both.
#
# How to read it
#   stdout: a markdown table, one row per cell, the MEDIAN ops/s of each server over the rounds
#   and pliant/redis (above 1: pliant is faster), then the memory lines (bytes of RSS per key,
#   pliant/redis above 1: pliant uses more). Every round's figures go to stderr at the end (and to
#   --json FILE). The machine is small and shared: redis-benchmark itself needs a core, and
#   redis-server is single-threaded while pliant's tokio runtime may use both cores, so read the
#   ratios as "on this box" figures, with PIN=1 to give each side one core. Differences under
#   ~10% are within the noise of one run.
#
# Usage
#   tools/bench/vs_redis.sh [--quick] [--json FILE]
#   env: ROUNDS (3), N (300000), N16 (2000000), KEYS (1000000), KEYSPACE (100000),
#        PIN (0; 1 = server on CPU 0, redis-benchmark/redis-cli on CPU 1), BENCH_TIMEOUT (600 s),
#        PLIANT_BIN (a pliant binary to measure instead of building target/release/pliant)
#   --quick: ROUNDS=1, N=20000, N16=100000, KEYS=100000 (a smoke test, under a minute).
#
# Needs redis-server, redis-cli, redis-benchmark (apt-get install redis-server redis-tools),
# python3, cargo. Listens on 127.0.0.1 only, on ports picked at run time; everything it writes
# lives in a temp dir removed at exit; every process it starts is stopped by its pid at exit.

set -euo pipefail

JSON_OUT=""
QUICK=0
while (($#)); do
    case "$1" in
        --quick) QUICK=1 ;;
        --json)
            [[ $# -ge 2 ]] || { echo "--json needs a file" >&2; exit 2; }
            JSON_OUT=$2
            shift
            ;;
        --json=*) JSON_OUT=${1#--json=} ;;
        -h | --help)
            sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

if ((QUICK)); then
    ROUNDS=${ROUNDS:-1} N=${N:-20000} N16=${N16:-100000} KEYS=${KEYS:-100000}
fi
ROUNDS=${ROUNDS:-3}
N=${N:-300000}
N16=${N16:-2000000}
KEYS=${KEYS:-1000000}
KEYSPACE=${KEYSPACE:-100000}
PIN=${PIN:-0}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
CLIENTS=50
VALUE_SIZE=100
HOST=127.0.0.1

for v in ROUNDS N N16 KEYS KEYSPACE BENCH_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
for c in redis-server redis-cli redis-benchmark python3 cargo timeout; do
    command -v "$c" >/dev/null || { echo "missing $c (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
done

log() { printf '%s\n' "$*" >&2; }
die() { log "vs_redis: $*"; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d -t pliant-vs-redis.XXXXXX)
SERVER_PID=""     # the one server running (never more than one at a time)
SERVER_KIND=""
SERVER_LOG=""
SERVER_DIR=""
PORT=""
ANOMALIES="$WORK/anomalies.txt"
: >"$ANOMALIES"

# Whether pid $1 is running (a zombie awaiting `wait` is not).
alive() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [[ ${s%% *} != Z ]]
}

# Stop the running server with SIGTERM (both stop cleanly on it: pliant syncs its store, Redis
# flushes its AOF), waiting at most 60 s before SIGKILL; reap it and remove its data dir.
stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    local pid=$SERVER_PID rc=0 i
    SERVER_PID=""
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 600; i++)); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        echo "$SERVER_KIND (pid $pid) still running 60 s after SIGTERM; killed" >>"$ANOMALIES"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if ((IN_CLEANUP)); then # exiting anyway: no status checks (bash may have dropped its jobs)
        [[ -n $SERVER_DIR ]] && rm -rf "$SERVER_DIR"
        return 0
    fi
    wait "$pid" 2>/dev/null || rc=$?
    if [[ $SERVER_KIND == pliant ]]; then
        if ((rc != 0)); then
            echo "pliant serve exited with status $rc after SIGTERM; its stderr: $(tr '\n' '|' <"$SERVER_LOG")" >>"$ANOMALIES"
        fi
        # Anything pliant printed besides its first line and the clean-stop line is worth a look.
        if grep -v -e '^pliant serve: listening on' -e '^pliant serve: stopped cleanly$' "$SERVER_LOG" >"$WORK/extra.txt" 2>/dev/null \
            && [[ -s $WORK/extra.txt ]]; then
            echo "pliant serve stderr: $(head -c 2000 "$WORK/extra.txt" | tr '\n' '|')" >>"$ANOMALIES"
        fi
        if ((rc == 0)) && ! grep -q '^pliant serve: stopped cleanly$' "$SERVER_LOG"; then
            echo "pliant serve exited 0 without 'stopped cleanly'" >>"$ANOMALIES"
        fi
    elif ((rc != 0)); then
        echo "redis-server exited with status $rc after SIGTERM" >>"$ANOMALIES"
    fi
    [[ -n $SERVER_DIR ]] && rm -rf "$SERVER_DIR"
    SERVER_DIR=""
}

IN_CLEANUP=0
cleanup() {
    local rc=$?
    trap - EXIT
    IN_CLEANUP=1
    stop_server || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

SRV_PIN=()
CLI_PIN=()
if [[ $PIN == 1 ]]; then
    command -v taskset >/dev/null || die "PIN=1 needs taskset (util-linux)"
    SRV_PIN=(taskset -c 0)
    CLI_PIN=(taskset -c 1)
fi

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Wait (at most 10 s) until the server on $PORT answers PING.
wait_ready() {
    local i
    for ((i = 0; i < 200; i++)); do
        alive "$SERVER_PID" || die "$SERVER_KIND exited during startup: $(tail -n 20 "$SERVER_LOG")"
        if [[ -n $PORT ]] && [[ $(timeout 2 redis-cli -h "$HOST" -p "$PORT" ping 2>/dev/null) == PONG ]]; then
            return 0
        fi
        sleep 0.05
    done
    die "$SERVER_KIND did not answer PING within 10 s: $(tail -n 20 "$SERVER_LOG")"
}

SEQ=0
# start_pliant nostore|store: a fresh `pliant serve` on a port it picks itself (--bind :0, read
# back from its first stderr line, so no window in which another process can take the port).
start_pliant() {
    local mode=$1 i line
    SEQ=$((SEQ + 1))
    SERVER_KIND=pliant
    SERVER_LOG="$WORK/pliant-$SEQ.log"
    PORT=""
    local args=(serve --bind "$HOST:0")
    if [[ $mode == store ]]; then
        SERVER_DIR="$WORK/pliant-store-$SEQ"
        args+=(--store "$SERVER_DIR" --durability everysec)
    else
        SERVER_DIR=""
        args+=(--no-store)
    fi
    : >"$SERVER_LOG"
    "${SRV_PIN[@]}" "$PLIANT" "${args[@]}" 2>>"$SERVER_LOG" &
    SERVER_PID=$!
    for ((i = 0; i < 200; i++)); do
        line=$(head -n 1 "$SERVER_LOG" 2>/dev/null || true)
        if [[ $line =~ ^pliant\ serve:\ listening\ on\ 127\.0\.0\.1:([0-9]+)\  ]]; then
            PORT=${BASH_REMATCH[1]}
            break
        fi
        alive "$SERVER_PID" || die "pliant serve exited during startup: $(cat "$SERVER_LOG")"
        sleep 0.05
    done
    [[ -n $PORT ]] || die "pliant serve printed no 'listening on' line within 10 s: $(cat "$SERVER_LOG")"
    wait_ready
}

# start_redis nostore|store: a fresh redis-server in its own temp dir.
start_redis() {
    local mode=$1
    SEQ=$((SEQ + 1))
    SERVER_KIND=redis
    SERVER_DIR="$WORK/redis-$SEQ"
    SERVER_LOG="$SERVER_DIR/redis.log"
    mkdir -p "$SERVER_DIR"
    PORT=$(free_port)
    local args=(--bind "$HOST" --port "$PORT" --dir "$SERVER_DIR" --logfile "$SERVER_LOG"
        --daemonize no --save '')
    if [[ $mode == store ]]; then
        args+=(--appendonly yes --appendfsync everysec)
    else
        args+=(--appendonly no)
    fi
    "${SRV_PIN[@]}" redis-server "${args[@]}" >/dev/null 2>&1 &
    SERVER_PID=$!
    wait_ready
}

start_server() { # pliant|redis nostore|store
    local want
    if [[ $1 == pliant ]]; then
        start_pliant "$2"
        want=$(readlink -f "$PLIANT")
    else
        start_redis "$2"
        want=$(readlink -f "$(command -v redis-server)")
    fi
    # The pid we will signal must be the server itself, not a wrapper around it.
    [[ $(readlink "/proc/$SERVER_PID/exe") == "$want" ]] || die "pid $SERVER_PID is not the $1 server"
}

vmrss_kib() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$SERVER_PID/status"
}

# bench P REQUESTS: sets SET_RPS and GET_RPS (runs in this shell, so a failure stops the script).
bench() {
    local p=$1 n=$2 out="$WORK/bench.csv" err="$WORK/bench.err" rc=0
    timeout --foreground "$BENCH_TIMEOUT" "${CLI_PIN[@]}" redis-benchmark -h "$HOST" -p "$PORT" \
        -c "$CLIENTS" -d "$VALUE_SIZE" -t set,get -n "$n" -P "$p" -r "$KEYSPACE" --csv \
        >"$out" 2>"$err" || rc=$?
    ((rc == 0)) || die "redis-benchmark against $SERVER_KIND failed (status $rc): $(cat "$err" "$out" | tail -n 20)"
    if [[ -s $err ]]; then
        echo "redis-benchmark against $SERVER_KIND (-P $p) stderr: $(head -c 1000 "$err" | tr '\n' '|')" >>"$ANOMALIES"
    fi
    alive "$SERVER_PID" || die "$SERVER_KIND died during redis-benchmark: $(tail -n 20 "$SERVER_LOG")"
    SET_RPS=$(awk -F'"' '$2 == "SET" { print $4 }' "$out")
    GET_RPS=$(awk -F'"' '$2 == "GET" { print $4 }' "$out")
    [[ $SET_RPS =~ ^[0-9.]+$ && $GET_RPS =~ ^[0-9.]+$ ]] \
        || die "no SET/GET figures from redis-benchmark against $SERVER_KIND: $(cat "$out" "$err")"
}

# ---------------------------------------------------------------------------------------------
if [[ -n ${PLIANT_BIN:-} ]]; then
    [[ -x $PLIANT_BIN ]] || die "PLIANT_BIN=$PLIANT_BIN is not an executable"
    SRC_BIN=$PLIANT_BIN
    log "vs_redis: measuring $SRC_BIN (PLIANT_BIN; not building)"
else
    log "vs_redis: building the release binary"
    (cd "$ROOT" && cargo build --release --locked -q) || die "cargo build --release --locked failed"
    SRC_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/pliant
fi
# A private copy: another build in the same target dir may relink target/release/pliant while
# this runs, and every cell must measure the same binary.
PLIANT="$WORK/pliant"
cp "$SRC_BIN" "$PLIANT"
PLIANT_VERSION=$("$PLIANT" --version)
REDIS_VERSION=$(redis-server --version | awk '{ sub(/^v=/, "", $3); print $3 }')
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null | head -n 1) ]]; then GIT_REV="$GIT_REV+dirty"; fi
# A binary given from outside was not built from this tree: its name, not the tree's commit.
if [[ -n ${PLIANT_BIN:-} ]]; then GIT_REV="PLIANT_BIN=$PLIANT_BIN"; fi
log "vs_redis: $PLIANT_VERSION ($GIT_REV) vs redis-server $REDIS_VERSION; ROUNDS=$ROUNDS N=$N N16=$N16 KEYS=$KEYS KEYSPACE=$KEYSPACE PIN=$PIN"

START=$(date +%s)
RESULTS="$WORK/results.tsv" # mode P op server round ops/s
: >"$RESULTS"

# Throughput. Each (round, mode, -P, server) gets a freshly started server with an empty store:
# restarting costs ~0.1 s, and it keeps cells independent of each other and of their order (a
# server reused across cells would carry the previous cell's keys, its AOF/LSM growth and
# background compaction into the next measurement, and later cells would be measured on a
# different state than earlier ones). Within one run, SET goes first and fills the keyspace, so
# GET reads keys that exist (~1-(1-1/KEYSPACE)^N of them).
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order=(pliant redis); else order=(redis pliant); fi
    for mode in nostore store; do
        for p in 1 16; do
            if ((p == 1)); then n=$N; else n=$N16; fi
            for srv in "${order[@]}"; do
                start_server "$srv" "$mode"
                bench "$p" "$n"
                stop_server
                printf '%s\t%s\tSET\t%s\t%s\t%s\n%s\t%s\tGET\t%s\t%s\t%s\n' \
                    "$mode" "$p" "$srv" "$r" "$SET_RPS" "$mode" "$p" "$srv" "$r" "$GET_RPS" >>"$RESULTS"
                log "  round $r/$ROUNDS  $mode  -P $p  $srv: SET $SET_RPS  GET $GET_RPS ops/s"
            done
        done
    done
done

# Memory per key: one fresh server of each, no persistence, KEYS distinct keys loaded as fast as
# the pipe goes. Once each (RSS after a given load varies little between runs).
gen_sets() {
    python3 - "$KEYS" "$VALUE_SIZE" <<'EOF'
import sys
n, size = int(sys.argv[1]), int(sys.argv[2])
value = b"v" * size
out = sys.stdout.buffer
chunk = []
for i in range(n):
    key = b"key:%012d" % i
    chunk.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, size, value))
    if len(chunk) == 10000:
        out.write(b"".join(chunk))
        chunk = []
out.write(b"".join(chunk))
EOF
}
MEM="$WORK/memory.tsv" # server rss_before_kib rss_after_kib dbsize load_seconds ok
: >"$MEM"
MEM_OK=1
for srv in pliant redis; do
    start_server "$srv" nostore
    sleep 0.5
    before=$(vmrss_kib)
    t0=$(date +%s.%N)
    rc=0
    gen_sets | timeout --foreground "$BENCH_TIMEOUT" "${CLI_PIN[@]}" redis-cli -h "$HOST" -p "$PORT" --pipe \
        >"$WORK/pipe.out" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    alive "$SERVER_PID" || die "$srv died while loading keys: $(tail -n 20 "$SERVER_LOG")"
    after=$(vmrss_kib)
    dbsize=$(timeout 10 redis-cli -h "$HOST" -p "$PORT" dbsize 2>&1 || true)
    ok=1
    if ((rc != 0)) || ! grep -q "errors: 0, replies: $KEYS\$" "$WORK/pipe.out"; then
        ok=0
        echo "redis-cli --pipe into $srv (status $rc): $(tail -n 5 "$WORK/pipe.out" | tr '\n' '|')" >>"$ANOMALIES"
    fi
    if [[ $dbsize != "$KEYS" ]]; then
        ok=0
        echo "DBSIZE on $srv after loading $KEYS keys: '$dbsize'" >>"$ANOMALIES"
    fi
    ((ok)) || MEM_OK=0
    load_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$srv" "$before" "$after" "$dbsize" "$load_s" "$ok" >>"$MEM"
    log "  memory  $srv: VmRSS $before -> $after KiB, DBSIZE $dbsize, loaded in $load_s s"
    stop_server
done
WALL=$(($(date +%s) - START))

# ---------------------------------------------------------------------------------------------
python3 - "$RESULTS" "$MEM" "$ANOMALIES" "$JSON_OUT" "$ROUNDS" "$N" "$N16" "$KEYS" "$KEYSPACE" \
    "$PLIANT_VERSION ($GIT_REV)" "$REDIS_VERSION" "$WALL" "$PIN" <<'EOF'
import json, statistics, sys

(results, mem, anomalies, json_out, rounds, n, n16, keys, keyspace,
 pliant_version, redis_version, wall, pin) = sys.argv[1:]
rounds, n, n16, keys, keyspace, wall = map(int, (rounds, n, n16, keys, keyspace, wall))

runs = {}
for line in open(results):
    mode, p, op, srv, r, ops = line.rstrip("\n").split("\t")
    runs.setdefault((mode, int(p), op), {}).setdefault(srv, []).append(float(ops))

MODES = {"nostore": "no store", "store": "persistent (everysec)"}
print(f"pliant serve ({pliant_version}) vs redis-server {redis_version}: median ops/s of "
      f"{rounds} round(s); redis-benchmark -c 50 -d 100 -r {keyspace} -t set,get, "
      f"-n {n} at -P 1, -n {n16} at -P 16{', server and client pinned to one CPU each' if pin == '1' else ''}")
print()
print("| cell | pliant ops/s | redis ops/s | pliant/redis |")
print("|---|---:|---:|---:|")
cells = []
for mode in ("nostore", "store"):
    for p in (1, 16):
        for op in ("SET", "GET"):
            d = runs[(mode, p, op)]
            pm, rm = statistics.median(d["pliant"]), statistics.median(d["redis"])
            cells.append({"mode": mode, "pipeline": p, "op": op, "pliant_median": pm,
                          "redis_median": rm, "ratio": pm / rm,
                          "pliant_runs": d["pliant"], "redis_runs": d["redis"]})
            print(f"| {MODES[mode]}, {op}, -P {p} | {pm:,.0f} | {rm:,.0f} | {pm / rm:.2f} |")
print()

memory = {}
for line in open(mem):
    srv, before, after, dbsize, load_s, ok = line.rstrip("\n").split("\t")
    before, after = int(before), int(after)
    memory[srv] = {"rss_before_kib": before, "rss_after_kib": after, "dbsize": dbsize,
                   "load_seconds": float(load_s), "ok": ok == "1",
                   "bytes_per_key": (after - before) * 1024 / keys}
for srv in ("pliant", "redis"):
    m = memory[srv]
    status = "" if m["ok"] else "  ** CHECK FAILED, see below **"
    print(f"memory {srv}: {m['bytes_per_key']:.1f} bytes/key (VmRSS {m['rss_before_kib'] / 1024:.1f} -> "
          f"{m['rss_after_kib'] / 1024:.1f} MiB for {keys:,} keys of 16-byte names and 100-byte values; "
          f"DBSIZE {m['dbsize']}; loaded with redis-cli --pipe in {m['load_seconds']:.2f} s){status}")
ratio = memory["pliant"]["bytes_per_key"] / memory["redis"]["bytes_per_key"]
print(f"memory pliant/redis: {ratio:.2f}")

notes = [l.rstrip("\n") for l in open(anomalies) if l.strip()]
if notes:
    print()
    print("anomalies:")
    for l in notes:
        print(f"- {l}")

print(f"\nper-round ops/s (wall time of the measurements: {wall} s):", file=sys.stderr)
for c in cells:
    print(f"  {MODES[c['mode']]:22} {c['op']} -P {c['pipeline']:<2}  pliant "
          + " ".join(f"{x:,.0f}" for x in c["pliant_runs"]) + "   redis "
          + " ".join(f"{x:,.0f}" for x in c["redis_runs"]), file=sys.stderr)

if json_out:
    with open(json_out, "w") as f:
        json.dump({"pliant": pliant_version, "redis": redis_version, "rounds": rounds,
                   "requests_p1": n, "requests_p16": n16, "keyspace": keyspace, "clients": 50,
                   "value_size": 100, "pinned": pin == "1", "cells": cells,
                   "memory": {"keys": keys, **memory, "ratio": ratio},
                   "anomalies": notes, "wall_seconds": wall}, f, indent=2)
        f.write("\n")
EOF

((MEM_OK)) || die "the memory check failed (see anomalies above)"
