#!/usr/bin/env bash
# Crash durability of `pliant serve` (issue 11): acknowledged writes survive a SIGKILL.
#
# What it shows
#   For each mode in MODES (always, everysec) and each of KILLS kill points: a fresh node on a
#   fresh store (`pliant serve --bind 127.0.0.1:0 --store DIR --durability MODE`); WRITERS client
#   connections (tools/bench/durability_client.py, plain-socket RESP) write SETs of distinct keys,
#   pipelined in random batches of 1..32, about 15% of them overwriting a key already
#   acknowledged with a new value; every value is derived from its key and version, so a read
#   tells which write it came from. Each +OK is timed as it arrives. Once MIN_ACKED writes are
#   acknowledged the node is killed with SIGKILL (by its pid) after a random further 0..EXTRA_MS
#   ms of writing, while the writers still have batches in flight. The node is restarted on the
#   same store, every key written is read back (pipelined GETs) and DBSIZE is checked.
#
# Pass criteria
#   always    no acknowledged write lost: every acknowledged key is there with the value of its
#             last acknowledged write (an overwrite counts), and no wrong value.
#   everysec  loss allowed, but bounded in time: the oldest lost acknowledged write was
#             acknowledged at most MAX_SPAN = 2 s before the kill (Redis's everysec promise is
#             "about a second": the sync runs once a second, plus the sync's own duration).
#             No wrong value.
#   both      at least MIN_ACKED writes acknowledged; no error reply; the writers' connections
#             were ended by the kill (not earlier); the node restarts on the store (no lock left
#             behind); DBSIZE equals the number of written keys read back; the restarted node
#             stops cleanly on SIGTERM.
#
# How to read it
#   stdout: the seed and parameters, a markdown table with one row per kill, then notes and
#   FAIL reasons, and a final PASS or FAIL line (exit status 0 or 1). Columns:
#     killed after     seconds of writing between MIN_ACKED acknowledgements and the SIGKILL
#     acknowledged     writes that got +OK before the kill (in brackets: how many of them were
#                      overwrites of a key)
#     lost             acknowledged writes whose value is not what is read back (the key is
#                      missing or holds an older acknowledged value); keys in brackets
#     wrong            values that no write of that key ever had (corruption): must be 0
#     in-flight found  writes sent but not acknowledged at the kill that are there anyway, of
#                      those in flight (informational: either outcome is correct)
#     span of loss     kill time minus the acknowledgement time of the oldest lost write
#     restart          time from starting the node again to its listening line (store recovery)
#   Progress goes to stderr.
#   What a SIGKILL does and does not test: the process dies, the kernel survives. Data the node
#   handed to the kernel (write(2) into the page cache) survives a SIGKILL whether or not it was
#   fsynced, so this shows that the node acknowledges only what it has written out and that the
#   store recovers its journal after a crash. It cannot show that `always` fsyncs before replying
#   (that needs a power cut, a VM snapshot or a block device that drops unsynced writes). At the
#   time of writing the store write(2)s each SET to its journal at once (strace: ~1 write per
#   SET; ~1 fsync per pipelined batch under always, one a second under everysec), so everysec
#   losing nothing to a SIGKILL is the expected result, and the everysec bound is only exercised
#   if the store starts buffering journal writes in the process.
#
# Usage
#   tools/bench/durability.sh [--quick] [--seed N] [--kills K] [--min-acked N] [--extra-ms MS]
#                             [--writers W] [--modes always,everysec] [--value-pad BYTES]
#   defaults: KILLS 5, MIN_ACKED 10000, EXTRA_MS 2000, WRITERS 2, MODES always,everysec, a
#   random seed (printed; --seed N repeats the same kill delays, batch sizes and overwrites; the
#   timing, hence the exact kill points, differs from run to run).
#   --quick: KILLS 2, EXTRA_MS 300 (about 10,000 writes per kill; well under a minute).
#   --value-pad BYTES: every value that many bytes longer (derived from its key and version, as
#   the rest of it; default 0: 20-150 bytes), e.g. 2048 so that values go to the store's blob
#   files (1 KiB and over) and the kills land among those files' writes.
#   env: PLIANT_BIN (a pliant binary to test instead of building target/release/pliant).
#
# Needs python3 (standard library), cargo. Loopback only, ports picked by the node (port 0);
# every process it starts is stopped by its own pid; every wait is bounded; its temp dir (stores,
# logs) is removed at exit.

set -euo pipefail
export LC_ALL=C # EPOCHREALTIME with a '.' decimal point

QUICK=0 SEED="" KILLS="" MIN_ACKED="" EXTRA_MS="" WRITERS="" MODES="" PAD=0
need() { [[ $# -ge 2 ]] || { echo "$1 needs a value" >&2; exit 2; }; }
while (($#)); do
    case "$1" in
        --quick) QUICK=1 ;;
        --seed) need "$@"; SEED=$2; shift ;;
        --kills) need "$@"; KILLS=$2; shift ;;
        --min-acked) need "$@"; MIN_ACKED=$2; shift ;;
        --extra-ms) need "$@"; EXTRA_MS=$2; shift ;;
        --writers) need "$@"; WRITERS=$2; shift ;;
        --modes) need "$@"; MODES=$2; shift ;;
        --value-pad) need "$@"; PAD=$2; shift ;;
        -h | --help)
            sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
if ((QUICK)); then
    KILLS=${KILLS:-2} EXTRA_MS=${EXTRA_MS:-300}
fi
KILLS=${KILLS:-5}
MIN_ACKED=${MIN_ACKED:-10000}
EXTRA_MS=${EXTRA_MS:-2000}
WRITERS=${WRITERS:-2}
MODES=${MODES:-always,everysec}
SEED=${SEED:-$((SRANDOM % 1000000000))}
MAX_SPAN=2
for v in KILLS MIN_ACKED WRITERS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
for v in EXTRA_MS SEED PAD; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "$v must be a non-negative integer (got '${!v}')" >&2; exit 2; }
done
# Read by the client as it writes and as it verifies, so both derive the same values.
export DURABILITY_VALUE_PAD=$PAD
IFS=, read -r -a MODE_LIST <<<"$MODES"
for m in "${MODE_LIST[@]}"; do
    [[ $m == always || $m == everysec ]] || { echo "--modes: always and/or everysec, not '$m'" >&2; exit 2; }
done
for c in python3 timeout; do
    command -v "$c" >/dev/null || { echo "missing $c" >&2; exit 1; }
done

log() { printf '%s\n' "$*" >&2; }
die() { log "durability: $*"; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLIENT=$ROOT/tools/bench/durability_client.py
[[ -f $CLIENT ]] || die "missing $CLIENT"
WORK=$(mktemp -d -t pliant-durability.XXXXXX)
ANOMALIES=$WORK/anomalies.txt # reasons to FAIL found by this script (not by the verifier)
NOTES=$WORK/notes.txt         # informational
: >"$ANOMALIES"
: >"$NOTES"
mkdir "$WORK/results"
NODE_PID="" WRITER_PID="" PORT=""

alive() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [[ ${s%% *} != Z ]]
}

cleanup() {
    local rc=$?
    trap - EXIT
    if [[ -n $WRITER_PID ]]; then kill -KILL "$WRITER_PID" 2>/dev/null || true; fi
    if [[ -n $NODE_PID ]]; then kill -KILL "$NODE_PID" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -n ${PLIANT_BIN:-} ]]; then
    [[ -x $PLIANT_BIN ]] || die "PLIANT_BIN=$PLIANT_BIN is not an executable"
    SRC_BIN=$PLIANT_BIN
else
    command -v cargo >/dev/null || die "missing cargo"
    log "durability: cargo build --release --locked"
    (cd "$ROOT" && cargo build --release --locked -q) || die "cargo build --release --locked failed"
    SRC_BIN=$ROOT/target/release/pliant
fi
# A private copy: a concurrent `cargo build` must not swap the binary between a kill and its restart.
BIN=$WORK/pliant
cp "$SRC_BIN" "$BIN"

# Seconds between two EPOCHREALTIME values.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# start_node MODE STORE LOG: starts a node in the background, sets NODE_PID and PORT; fails,
# with the reason in START_ERR, if it has not printed its listening line within 60 s.
start_node() {
    local mode=$1 store=$2 logf=$3 i line
    PORT="" START_ERR=""
    "$BIN" serve --bind 127.0.0.1:0 --store "$store" --durability "$mode" 2>"$logf" &
    NODE_PID=$!
    for ((i = 0; i < 6000; i++)); do
        line=$(head -n 1 "$logf" 2>/dev/null || true)
        if [[ $line =~ ^pliant\ serve:\ listening\ on\ 127\.0\.0\.1:([0-9]+)\  ]]; then
            PORT=${BASH_REMATCH[1]}
            break
        fi
        alive "$NODE_PID" || break
        sleep 0.01
    done
    if [[ -z $PORT ]]; then
        local rc=0
        if alive "$NODE_PID"; then kill -KILL "$NODE_PID" 2>/dev/null || true; fi
        wait "$NODE_PID" 2>/dev/null || rc=$?
        NODE_PID=""
        START_ERR="exit status $rc; stderr: $(head -c 2000 "$logf" | tr '\n' '|')"
        return 1
    fi
    [[ $(readlink "/proc/$NODE_PID/exe" 2>/dev/null) == "$(readlink -f "$BIN")" ]] \
        || echo "pid $NODE_PID is not the node ($(readlink "/proc/$NODE_PID/exe" 2>/dev/null || echo gone))" >>"$ANOMALIES"
}

# stop_node LABEL LOG: SIGTERM, at most 30 s to stop cleanly, then SIGKILL (an anomaly).
stop_node() {
    local label=$1 logf=$2 pid=$NODE_PID rc=0 i
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        echo "$label: the restarted node was still running 30 s after SIGTERM; killed" >>"$ANOMALIES"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || rc=$?
    NODE_PID=""
    if ((rc != 0)) || ! grep -q '^pliant serve: stopped cleanly$' "$logf"; then
        echo "$label: the restarted node exited with status $rc after SIGTERM; stderr: $(head -c 2000 "$logf" | tr '\n' '|')" >>"$ANOMALIES"
    fi
}

# Anything a node printed besides its listening line and the clean-stop line.
extra_stderr() {
    grep -v -e '^pliant serve: listening on' -e '^pliant serve: stopped cleanly$' "$1" | head -c 2000 | tr '\n' '|' || true
}

RANDOM=$SEED # bash's generator: the writers' seeds and the kill delays follow from SEED

T_START=$EPOCHREALTIME
echo "Seed $SEED: ${KILLS} kill points per mode, SIGKILL after ≥ ${MIN_ACKED} acknowledged writes plus 0–${EXTRA_MS} ms, ${WRITERS} writer connections, batches of 1–32, ~15% overwrites; everysec bound ${MAX_SPAN} s."
echo
RUN_NO=0
for mode in "${MODE_LIST[@]}"; do
    for ((k = 1; k <= KILLS; k++)); do
        RUN_NO=$((RUN_NO + 1))
        label="$mode kill point $k"
        wseed=$((RANDOM * 32768 + RANDOM))
        delay_ms=$(((RANDOM * 32768 + RANDOM) % (EXTRA_MS + 1)))
        dir=$WORK/run-$RUN_NO
        mkdir "$dir"
        store=$dir/store
        if ! start_node "$mode" "$store" "$dir/node1.log"; then
            echo "$label: the node did not start: $START_ERR" >>"$ANOMALIES"
            rm -rf "$dir"
            continue
        fi
        log "durability: $label: node pid $NODE_PID on port $PORT; writing (seed $wseed)"
        python3 "$CLIENT" write --port "$PORT" --state "$dir/state.json" --ready "$dir/ready" \
            --seed "$wseed" --writers "$WRITERS" --min-acked "$MIN_ACKED" --max-seconds 300 &
        WRITER_PID=$!
        ready=0
        for ((i = 0; i < 30000; i++)); do # at most 300 s
            [[ -e $dir/ready ]] && { ready=1; break; }
            alive "$WRITER_PID" || break
            alive "$NODE_PID" || break
            sleep 0.01
        done
        if ((ready)); then
            log "durability: $label: $(cut -d' ' -f1 "$dir/ready") acknowledged; SIGKILL in $delay_ms ms"
            sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
        else
            echo "$label: $MIN_ACKED acknowledged writes never reached (writer or node ended, or 300 s passed)" >>"$ANOMALIES"
        fi
        node_rc=0
        if alive "$NODE_PID"; then
            kill -KILL "$NODE_PID"
            T_KILL=$EPOCHREALTIME # after the kill: a span measured from here errs long
        else
            T_KILL=$EPOCHREALTIME
            echo "$label: the node died before the kill" >>"$ANOMALIES"
        fi
        wait "$NODE_PID" 2>/dev/null || node_rc=$?
        NODE_PID=""
        ((node_rc == 137)) || echo "$label: the killed node's exit status was $node_rc, not 137" >>"$ANOMALIES"
        x=$(extra_stderr "$dir/node1.log")
        [[ -z $x ]] || echo "$label: the node printed before the kill: $x" >>"$NOTES"
        # The writers see the connection drop; at most 60 s for them to write their state.
        for ((i = 0; i < 600; i++)); do
            alive "$WRITER_PID" || break
            sleep 0.1
        done
        if alive "$WRITER_PID"; then
            echo "$label: the writer was still running 60 s after the kill; killed" >>"$ANOMALIES"
            kill -KILL "$WRITER_PID" 2>/dev/null || true
        fi
        wrc=0
        wait "$WRITER_PID" 2>/dev/null || wrc=$?
        WRITER_PID=""
        if ((wrc != 0)) || [[ ! -s $dir/state.json ]]; then
            echo "$label: the writer failed (status $wrc)" >>"$ANOMALIES"
            rm -rf "$dir"
            continue
        fi
        ((ready)) || { rm -rf "$dir"; continue; }

        log "durability: $label: killed; restarting on the same store"
        t0=$EPOCHREALTIME
        if ! start_node "$mode" "$store" "$dir/node2.log"; then
            echo "$label: the node did not restart on the store: $START_ERR" >>"$ANOMALIES"
            rm -rf "$dir"
            continue
        fi
        restart_s=$(elapsed "$t0" "$EPOCHREALTIME")
        out=$WORK/results/$(printf '%03d' "$RUN_NO").json
        vrc=0
        timeout 300 python3 "$CLIENT" verify --port "$PORT" --state "$dir/state.json" \
            --kill-time "$T_KILL" --mode "$mode" --run "$k" --seed "$wseed" \
            --min-acked "$MIN_ACKED" --max-span "$MAX_SPAN" --restart-s "$restart_s" \
            --out "$out" || vrc=$?
        ((vrc == 0)) || echo "$label: verify failed (status $vrc)" >>"$ANOMALIES"
        stop_node "$label" "$dir/node2.log"
        x=$(extra_stderr "$dir/node2.log")
        [[ -z $x ]] || echo "$label: the restarted node printed: $x" >>"$NOTES"
        rm -rf "$dir"
    done
done
WALL=$(elapsed "$T_START" "$EPOCHREALTIME")

trc=0
shopt -s nullglob
results=("$WORK"/results/*.json)
if ((${#results[@]})); then
    python3 "$CLIENT" table "${results[@]}" || trc=$?
else
    echo "(no kill point completed)"
    trc=1
fi
while IFS= read -r line; do echo "- note: $line"; done <"$NOTES"
while IFS= read -r line; do echo "- FAIL: $line"; done <"$ANOMALIES"
echo
expected=$((KILLS * ${#MODE_LIST[@]}))
if ((trc == 0)) && [[ ! -s $ANOMALIES ]] && ((${#results[@]} == expected)); then
    echo "PASS: ${#results[@]} kill points, seed $SEED, ${WALL} s"
    exit 0
fi
echo "FAIL: ${#results[@]} of $expected kill points verified, seed $SEED, ${WALL} s"
exit 1
