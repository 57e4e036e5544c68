#!/usr/bin/env bash
# The cluster at data scale (issue 34, "Must show", first bullet): 3 nodes holding gigabytes,
# one node commissioned and later decommissioned, idle and under a redis-benchmark load whose run
# spans the move, beside Redis 7.0 Cluster's `--cluster rebalance` of the same data.
#
# What it measures
#   pliant: `pliant cluster up --nodes 3 --base-port 0 --json -- --durability everysec` (each
#   node's store in the temp dir, synced once a second), loaded with KEYS keys `k:<i>` of VALUE
#   bytes (default 2,000,000 of 1,024: 2 GiB of values) spread over every slot: the helper
#   (rescale_scale.py load) routes each key to the master owning its slot (CRC16 over the map
#   of CLUSTER SLOTS) and feeds one `redis-cli --pipe` per master; every SET must be
#   acknowledged (each redis-cli's "errors: 0, replies: N", summing to KEYS). Then, in order:
#     idle commission      `pliant scale commission --cluster ADDR --add 1 --json`, nothing else
#                          running
#     idle decommission    `pliant scale decommission --remove <the added id> --json`
#     loaded commission    the same commission under the load (below), with the checker; then
#                          the same load as long again with no move (the "without" columns)
#     loaded decommission  likewise
#   For each: the report's own `seconds` (the moves' wall time) and the command's wall time
#   (measuring the bandwidth, reading the slots, planning and starting or stopping the node
#   included), bytes and keys moved (the report's `bytes_moved`, `keys_moved`), T_t, and
#   duration / T_t with the report's seconds. T_t is the planner's own transfer-time target
#   (`planned.t_t` of the report, Pufferscale's T_t: for a commission the new node's share of
#   the data, for a decommission the leaving node's data, over `bandwidth_bytes_per_s`, which
#   one node measures to another (`PLIANT.NETPROBE`: one way, half an ECHO round trip of 4 MiB;
#   `bandwidth_between` names them); the JSON also has the plan's `t_max` (its longest
#   per-node transfer time), `planned_bytes`, each link the moves used as its source measured
#   it (`links`) and the plan's transfer time by those links (`links_t_max`).
#   Servers' CPU: user + system CPU seconds the servers used during the move, and per key moved
#   (pliant: the supervisor, with its embedded coordination store, and every node, a new one from
#   its start and a leaving one until it exits; Redis: its four redis-server processes; neither
#   counts the command that orders the move), from /proc: on a shared machine a figure that
#   wall time cannot give, what the move itself costs.
#   The load: `redis-benchmark --cluster` as two concurrent processes pointed at the first
#   node, GET_CLIENTS (40) clients of GET and SET_CLIENTS (10) of SET (80% / 20% of the 50
#   clients: redis-benchmark runs one command mix per process), -d VALUE, -r 100000, each in a
#   loop (-l) of iterations of GET_CHUNK / SET_CHUNK requests. Started 1 s before the move and
#   stopped by pid as soon as the move's command returns; the "without" run is the same load
#   right after, for as long (the command's wall time + 1 s), on the cluster as the move left
#   it (4 nodes after the commission, 3 after the decommission). Only
#   completed iterations count (a chunk cut off at the end is dropped, so the figures cover the
#   move to within one iteration, ~0.5-1 s): ops/s is each process's requests over its
#   iterations' time, summed; p50/p99 over all requests of both processes, merged from the
#   latency distributions each iteration prints (cumulative counts at its percentiles and at
#   fixed latencies, interpolated linearly between them: ~0.1 ms steps below 2 ms, 1 ms steps
#   above, so a p99 of several ms is good to about a millisecond). redis-benchmark
#   --cluster gives each client the hash tag of one slot of its master, so the load touches ~50
#   slots, and its GETs read its own keys (many miss): a move affects it only through those
#   slots and through the nodes' shared CPU. Its errors (e.g. -TRYAGAIN, not retried by it) and
#   map re-reads (a MOVED or ASK) are counted. Its SETs add keys of their own (VALUE bytes each,
#   up to -r 100000 per hash tag), so the loaded phases move more bytes than the idle ones.
#   The checker (rescale_scale.py checker, during each loaded move): one raw-socket RESP client
#   that follows -MOVED/-ASK and retries -TRYAGAIN, writing distinct keys `ck:<phase>:<i>` (every
#   slot, the moving ones too) twice each with known values, recording each acknowledged write;
#   after the move it reads every one back: lost = missing, stale = not the last acknowledged
#   value. At the end every `k:<i>` is read back with its value (missing, wrong).
#   Redis: 3 masters of `redis-server --cluster-enabled yes --appendonly yes --appendfsync
#   everysec --save ''` (AOF synced once a second, as pliant's everysec store; no RDB) joined with
#   `redis-cli --cluster create`, loaded the same way, a 4th empty master added with
#   `redis-cli --cluster add-node`, then `redis-cli --cluster rebalance ADDR
#   --cluster-use-empty-masters` timed (idle commission), then `--cluster rebalance ADDR
#   --cluster-weight <4th>=0` timed (idle decommission; the node stays in the cluster, empty).
#   Keys moved: the 4th master's DBSIZE after (before) it; bytes moved: those keys × (VALUE +
#   key length), the same count as pliant's `bytes_moved` (key and value); duration / T_t uses
#   pliant's T_t of the same phase (the same data and model). pliant runs first, then its
#   directory is removed and Redis runs (never both at once).
#
# How to read it
#   stdout: a markdown table, one row per system and phase: duration (report, wall), bytes and
#   keys moved, T_t, duration / T_t, the load's ops/s, p50 and p99 during the move / without
#   it and the p99 ratio, p99.9 and the largest latency printed (during / without: a stall of
#   seconds shows there and in ops/s, not in p99), the checker's acknowledged keys, lost and
#   stale; then pliant / Redis
#   duration of the idle phases and the final read-back. The issue's goals: idle duration <= 3 x
#   T_t, p99 during <= 2 x without, 0 lost and 0 stale. Progress goes to stderr. --json FILE:
#   every record (the full rescale reports, the load per process, the checker's counts).
#   Exit status 1 if a key was lost or wrong, a checker write was lost or stale, the load or a
#   move failed, or something did not stop; the goals above are reported, not enforced.
#   This machine is small: 2 cores carry 3-4 nodes, the mover, redis-benchmark and the checker.
#
# Usage
#   tools/bench/rescale_scale.sh [--quick] [--json FILE] [--keys N] [--value BYTES] [--no-redis]
#   --quick: 100,000 keys (a smoke run of a minute or two); --keys/--value win over it.
#   --no-redis: pliant only.
#   env: PLIANT_BIN (the binary to measure; else target/release/pliant is built),
#        GET_CLIENTS (40), SET_CLIENTS (10), GET_CHUNK (20000), SET_CHUNK (5000),
#        MOVE_TIMEOUT (3600 s; --quick 600), LOAD_TIMEOUT (3600 s; --quick 600),
#        RETRIES (1: a `pliant scale` command that fails is run again that many times, as an
#        operator would, since a re-run finishes what it left; the phase's wall time then spans
#        every attempt, the report's seconds are the last one's, and the run fails after the
#        table, which names the attempts and their errors; 0: the first failure ends the run)
#
# Needs redis-server, redis-cli and redis-benchmark 7.x (apt-get install redis-server
# redis-tools), python3, stdbuf and timeout (coreutils), cargo unless PLIANT_BIN is set. Loopback
# only, ports picked at run time; everything (stores, AOF, logs) in one temp dir removed at
# exit; every process stopped by its own pid (pliant's nodes by their supervisor, checked by
# their pids after); every wait bounded. Disk: about 3 x the data (pliant's stores, then
# Redis's AOF; check `df` first for the default 2 GiB).

set -euo pipefail

JSON_OUT="" QUICK=0 KEYS="" VALUE="" REDIS=1
need() { [[ $# -ge 2 ]] || { echo "rescale_scale.sh: $1 needs a value" >&2; exit 2; }; }
while (($#)); do
  case "$1" in
    --quick) QUICK=1 ;;
    --json) need "$@"; JSON_OUT=$(realpath -m -- "$2"); shift ;;
    --keys) need "$@"; KEYS=$2; shift ;;
    --value) need "$@"; VALUE=$2; shift ;;
    --no-redis) REDIS=0 ;;
    -h | --help)
      sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) echo "rescale_scale.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if ((QUICK)); then
  KEYS=${KEYS:-100000}
  MOVE_TIMEOUT=${MOVE_TIMEOUT:-600} LOAD_TIMEOUT=${LOAD_TIMEOUT:-600}
fi
KEYS=${KEYS:-2000000} VALUE=${VALUE:-1024}
MOVE_TIMEOUT=${MOVE_TIMEOUT:-3600} LOAD_TIMEOUT=${LOAD_TIMEOUT:-3600}
GET_CLIENTS=${GET_CLIENTS:-40} SET_CLIENTS=${SET_CLIENTS:-10}
GET_CHUNK=${GET_CHUNK:-20000} SET_CHUNK=${SET_CHUNK:-5000} RETRIES=${RETRIES-1}
[[ $RETRIES =~ ^[0-9]+$ ]] || { echo "rescale_scale.sh: RETRIES must be a non-negative integer" >&2; exit 2; }
for v in KEYS VALUE MOVE_TIMEOUT LOAD_TIMEOUT GET_CLIENTS SET_CLIENTS GET_CHUNK SET_CHUNK; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "rescale_scale.sh: $v must be a positive integer (got '${!v}')" >&2; exit 2; }
done

log() { printf 'rescale_scale: %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }
for c in redis-server redis-cli redis-benchmark python3 stdbuf timeout; do
  command -v "$c" >/dev/null || die "needs $c (apt-get install -y redis-server redis-tools coreutils python3)"
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/lib/redis_cluster.sh
source "$ROOT/tools/lib/redis_cluster.sh"
HELPER=$ROOT/tools/bench/rescale_scale.py
HOST=127.0.0.1
if [[ -n ${PLIANT_BIN:-} ]]; then
  [[ -x $PLIANT_BIN ]] || die "PLIANT_BIN=$PLIANT_BIN is not an executable"
  SRC_BIN=$PLIANT_BIN
else
  command -v cargo >/dev/null || die "needs cargo (or PLIANT_BIN)"
  log "building the release binary"
  (cd "$ROOT" && cargo build --release --locked -q) || die "cargo build --release --locked failed"
  SRC_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/pliant
fi

WORK=$(mktemp -d -t pliant-rescale-scale.XXXXXX)
REC=$WORK/records
mkdir -p "$REC"
# A private copy: a concurrent build must not swap the binary the supervisor starts nodes from.
PLIANT=$WORK/pliant
cp "$SRC_BIN" "$PLIANT"
PLIANT_EXE=$(readlink -f "$PLIANT")
SUP_PID="" SUP_NODES=() REDIS_PIDS=() BENCH_PIDS=() CHECKER_PID="" STEP_PID=""
FAILED=0

alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ ${s%% *} != Z ]]
}
children_of() { cat "/proc/$1/task/"*/children 2>/dev/null || true; }
# wait_gone TENTHS PID...: 0 once none runs, 1 if one still does after TENTHS/10 s.
wait_gone() {
  local tenths=$1 i pid any
  shift
  for ((i = 0; i <= tenths; i++)); do
    any=0
    for pid in "$@"; do alive "$pid" && { any=1; break; }; done
    ((any)) || return 0
    ((i == tenths)) || sleep 0.1
  done
  return 1
}
# stop_pids TENTHS PID...: SIGTERM, then SIGKILL after TENTHS/10 s; 1 if a kill was needed.
stop_pids() {
  local tenths=$1 pid rc=0
  shift
  (($#)) || return 0
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  if ! wait_gone "$tenths" "$@"; then
    for pid in "$@"; do
      if alive "$pid"; then
        log "pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | head -c 200)) did not stop; killed"
        kill -KILL "$pid" 2>/dev/null || true
        rc=1
      fi
    done
  fi
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
  return "$rc"
}

stop_load() {
  ((${#BENCH_PIDS[@]})) || return 0
  local p=("${BENCH_PIDS[@]}")
  BENCH_PIDS=()
  stop_pids 50 "${p[@]}" || true
}

# cpu_seconds PID...: user + system CPU seconds the processes have used so far, with the
# children they have reaped (a decommissioned node's, reaped by the supervisor), from /proc.
cpu_seconds() {
  python3 - "$@" <<'EOF'
import os, sys
t = 0
for p in sys.argv[1:]:
    try:
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    t += sum(int(x) for x in f[11:15])  # utime, stime, cutime, cstime
print(t / os.sysconf("SC_CLK_TCK"))
EOF
}

# The supervisor stops its nodes (the commissioned ones too); then none of them may run.
stop_pliant() {
  [[ -n $SUP_PID ]] || return 0
  local sup=$SUP_PID rc=0 nodes pid
  SUP_PID=""
  # shellcheck disable=SC2207
  nodes=("${SUP_NODES[@]}" $(children_of "$sup"))
  SUP_NODES=()
  stop_pids 900 "$sup" || rc=1
  if ((${#nodes[@]})) && ! wait_gone 100 "${nodes[@]}"; then
    for pid in "${nodes[@]}"; do
      if alive "$pid" && [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$PLIANT_EXE" ]]; then
        log "pliant node $pid still runs after its supervisor stopped; killed"
        kill -KILL "$pid" 2>/dev/null || true
        rc=1
      fi
    done
  fi
  return "$rc"
}

stop_redis() {
  ((${#REDIS_PIDS[@]})) || return 0
  local p=("${REDIS_PIDS[@]}")
  REDIS_PIDS=()
  stop_pids 600 "${p[@]}"
}

cleanup() {
  local rc=$? ok=0
  trap - EXIT
  stop_load
  [[ -z $CHECKER_PID ]] || stop_pids 50 "$CHECKER_PID" || true
  [[ -z $STEP_PID ]] || stop_pids 100 "$STEP_PID" || true
  stop_pliant || ok=1
  stop_redis || ok=1
  rm -rf "$WORK"
  if ((ok)); then
    log "FAIL: a process did not stop cleanly"
    ((rc)) || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# jget FILE EXPR: a value of a JSON file (EXPR over `d`).
jget() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# run_bounded SECONDS OUT ERR CMD...: CMD in the background (so an interrupt reaches the trap),
# killed after SECONDS; its status.
run_bounded() {
  local limit=$1 out=$2 err=$3 rc=0
  shift 3
  timeout "$limit" "$@" >"$out" 2>"$err" </dev/null &
  STEP_PID=$!
  wait "$STEP_PID" || rc=$?
  STEP_PID=""
  return "$rc"
}

# start_load NAME PORT: the two redis-benchmark loops, output in $WORK/NAME-{get,set}.out.
start_load() {
  local name=$1 port=$2
  stdbuf -oL redis-benchmark --cluster -h "$HOST" -p "$port" -c "$GET_CLIENTS" -n "$GET_CHUNK" \
    -r 100000 -d "$VALUE" -t get -l >"$WORK/$name-get.out" 2>&1 </dev/null &
  BENCH_PIDS+=($!)
  stdbuf -oL redis-benchmark --cluster -h "$HOST" -p "$port" -c "$SET_CLIENTS" -n "$SET_CHUNK" \
    -r 100000 -d "$VALUE" -t set -l >"$WORK/$name-set.out" 2>&1 </dev/null &
  BENCH_PIDS+=($!)
}
# load_result NAME SPAN: the merged figures of NAME's load (JSON on stdout).
load_result() {
  python3 "$HELPER" bench --span "$2" "get=$WORK/$1-get.out" "set=$WORK/$1-set.out"
}

# ---------------------------------------------------------------------------------------------
# pliant
start_pliant() {
  local dir=$WORK/pcluster i
  : >"$WORK/up.json"
  "$PLIANT" cluster up --nodes 3 --base-port 0 --json --dir "$dir" -- --durability everysec \
    >"$WORK/up.json" 2>"$WORK/up.log" </dev/null &
  SUP_PID=$!
  for ((i = 0; i < 600; i++)); do
    [[ $(wc -l <"$WORK/up.json") -ge 1 ]] && break
    alive "$SUP_PID" || die "pliant cluster up exited: $(tail -n 20 "$WORK/up.log")"
    sleep 0.1
  done
  [[ $(wc -l <"$WORK/up.json") -ge 1 ]] || die "pliant cluster up printed nothing within 60 s"
  SEED=$(head -n 1 "$WORK/up.json" | python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["nodes"][0]["addr"])')
  # shellcheck disable=SC2207
  SUP_NODES=($(head -n 1 "$WORK/up.json" | python3 -c 'import json, sys; print(*json.loads(sys.stdin.readline())["pids"])'))
  PORT=${SEED##*:}
  log "pliant: cluster up, first node $SEED"
}

# load_keys NAME SEED: KEYS keys spread over every slot, each acknowledged.
load_keys() {
  local t0 rc=0
  t0=$(now)
  log "$1: loading $KEYS keys of $VALUE bytes"
  run_bounded "$LOAD_TIMEOUT" "$REC/$1-load.json" "$WORK/$1-load.err" \
    python3 "$HELPER" load --seed "$2" --keys "$KEYS" --value "$VALUE" --tmp "$WORK" || rc=$?
  ((rc == 0)) || die "$1: loading failed (status $rc): $(tail -n 20 "$WORK/$1-load.err") $(cat "$REC/$1-load.json")"
  log "$1: loaded in $(elapsed "$t0") s"
}

# pliant_move PHASE commission|decommission LOADED: one rescale; its record in $REC/PHASE.json.
pliant_move() {
  local phase=$1 kind=$2 loaded=$3 t0 wall rc=0 args span base=""
  local tag=${phase// /-}
  if [[ $kind == commission ]]; then args=(--add 1); else args=(--remove "$ADDED_ID"); fi
  if ((loaded)); then
    python3 "$HELPER" checker --seed "$SEED" --phase "$tag" \
      >"$WORK/$tag-checker.json" 2>"$WORK/$tag-checker.err" </dev/null &
    CHECKER_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
      grep -q '^ready' "$WORK/$tag-checker.err" 2>/dev/null && break
      alive "$CHECKER_PID" || die "$phase: the checker exited: $(cat "$WORK/$tag-checker.err")"
      sleep 0.1
    done
    start_load "$tag-during" "$PORT"
    sleep 1
  fi
  log "pliant: $phase: pliant scale $kind ${args[*]}"
  local cpu0 cpu1
  # shellcheck disable=SC2046
  cpu0=$(cpu_seconds "$SUP_PID" $(children_of "$SUP_PID"))
  t0=$(now)
  : >"$WORK/$tag.failures"
  local attempt
  for ((attempt = 1; ; attempt++)); do
    rc=0
    run_bounded "$MOVE_TIMEOUT" "$WORK/$tag.report.json" "$WORK/$tag.report.err" \
      "$PLIANT" scale "$kind" --cluster "$SEED" "${args[@]}" --json || rc=$?
    log "pliant: $phase: attempt $attempt returned after $(elapsed "$t0") s (status $rc)"
    ((rc != 0 && rc != 124 && attempt <= RETRIES)) || break
    # A rescale run again finishes what the failed one left (docs/cluster.md): as an operator
    # would, and the run counts it (a failed attempt fails the run, after the table).
    log "pliant: $phase: FAILED: $(tail -n 3 "$WORK/$tag.report.err" | tr '\n' ' '); the nodes' warnings:"
    show_logs
    printf '%s\n' "attempt $attempt after $(elapsed "$t0") s: $(tail -n 3 "$WORK/$tag.report.err" | tr '\n' ' ')" >>"$WORK/$tag.failures"
    FAILED=1
    sleep 5
  done
  wall=$(elapsed "$t0")
  # shellcheck disable=SC2046
  cpu1=$(cpu_seconds "$SUP_PID" $(children_of "$SUP_PID"))
  if ((loaded)); then
    stop_load
    kill -TERM "$CHECKER_PID" 2>/dev/null || true
    # It reads every acknowledged key back, then exits: at most 10 minutes.
    local j
    for ((j = 0; j < 6000; j++)); do alive "$CHECKER_PID" || break; sleep 0.1; done
    if alive "$CHECKER_PID"; then
      kill -KILL "$CHECKER_PID" 2>/dev/null || true
      FAILED=1
      log "$phase: the checker did not finish reading back within 10 minutes"
    fi
    wait "$CHECKER_PID" 2>/dev/null || { log "$phase: the checker failed: $(tail -n 5 "$WORK/$tag-checker.err")"; FAILED=1; }
    CHECKER_PID=""
    # The load ran 1 s before the move and until its command returned.
    span=$(awk -v w="$wall" 'BEGIN { printf "%.3f", w + 1 }')
    load_result "$tag-during" "$span" >"$WORK/$tag-during.json"
    if ((rc == 0)); then
      log "pliant: $phase: the load alone for as long ($span s), on the cluster as the move left it"
      start_load "$tag-without" "$PORT"
      sleep "$span"
      stop_load
      load_result "$tag-without" "$span" >"$WORK/$tag-without.json"
      base=$WORK/$tag-without.json
    fi
  fi
  if ((rc != 0)); then
    # Every attempt failed: the phase is recorded as failed, the later pliant phases are skipped
    # (the table still shows what was measured) and the run fails.
    log "pliant: $phase: FAILED for good (status $rc; 124: over $MOVE_TIMEOUT s): $(tail -n 5 "$WORK/$tag.report.err" | tr '\n' ' ')"
    show_logs
    printf '%s\n' "attempt $attempt (the last) after $wall s: $(tail -n 3 "$WORK/$tag.report.err" | tr '\n' ' ')" >>"$WORK/$tag.failures"
    FAILED=1
  fi
  python3 - "$REC/$tag.json" "$phase" "$WORK/$tag.report.json" "$wall" "$loaded" \
    "${base:-}" "$WORK/$tag-during.json" "$WORK/$tag-checker.json" "$WORK/$tag.failures" "$rc" \
    "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }')" <<'EOF'
import json, os, sys
out, phase, report, wall, loaded, base, during, checker, failures, rc, cpu = sys.argv[1:]
failed = [l.rstrip("\n") for l in open(failures) if l.strip()]
if rc != "0":
    rec = {"system": "pliant", "phase": phase, "failed": True, "wall_seconds": float(wall),
           "attempts": len(failed), "failed_attempts": failed}
    if loaded == "1":
        rec["load_during"] = json.load(open(during))
        rec["checker"] = json.load(open(checker))
    json.dump(rec, open(out, "w"), indent=1)
    sys.exit(0)
r = json.load(open(report))
pl = r["planned"]
rec = {"system": "pliant", "phase": phase, "seconds": r["seconds"], "wall_seconds": float(wall),
       "attempts": 1 + len(failed), "failed_attempts": failed,
       "bytes_moved": r["bytes_moved"], "keys_moved": r["keys_moved"],
       "planned_bytes": r["planned_bytes"], "t_t": pl["t_t"], "t_max": pl["t_max"],
       "bandwidth_bytes_per_s": r["bandwidth_bytes_per_s"],
       "bandwidth_between": r.get("bandwidth_between"),
       "links": r.get("links"), "links_t_max": r.get("links_t_max"),
       "cpu_seconds": float(cpu),
       "cpu_us_per_key": 1e6 * float(cpu) / r["keys_moved"] if r["keys_moved"] else None,
       "duration_over_t_t": r["seconds"] / pl["t_t"] if pl["t_t"] > 0 else None,
       "wall_over_t_t": float(wall) / pl["t_t"] if pl["t_t"] > 0 else None,
       "report": r}
if loaded == "1":
    rec["load_without"] = json.load(open(base))
    rec["load_during"] = json.load(open(during))
    rec["checker"] = json.load(open(checker))
json.dump(rec, open(out, "w"), indent=1)
EOF
  if ((rc != 0)); then
    if ((loaded)); then
      log "pliant: $phase: checker $(jget "$REC/$tag.json" '"%(acknowledged_keys)d acknowledged keys, lost %(lost)d, stale %(stale)d, errors %(errors)d %(first_errors)s %(examples)s" % d["checker"]')"
    fi
    return 1
  fi
  if [[ $kind == commission ]]; then
    ADDED_ID=$(jget "$WORK/$tag.report.json" 'd["added"][0]')
  fi
  log "pliant: $phase: $(jget "$REC/$tag.json" '"%.2f s (wall %.2f s), %d bytes, %d keys, T_t %.3f s" % (d["seconds"], d["wall_seconds"], d["bytes_moved"], d["keys_moved"], d["t_t"])')"
  if ((loaded)); then
    log "pliant: $phase: checker $(jget "$REC/$tag.json" '"%(acknowledged_keys)d acknowledged keys, lost %(lost)d, stale %(stale)d, errors %(errors)d %(first_errors)s %(examples)s" % d["checker"]')"
    [[ $(jget "$REC/$tag.json" 'd["checker"]["lost"] + d["checker"]["stale"] + d["checker"]["errors"]') == 0 ]] || FAILED=1
  fi
  cp "$WORK/$tag.report.json" "$REC/$tag.report.json"
}

# ---------------------------------------------------------------------------------------------
# Redis Cluster

# redis_wait_agree ADDR: until `redis-cli --cluster check` says every slot is covered, the nodes
# agree and nothing warns (an open slot, a migrating or importing one); at most 60 s.
redis_wait_agree() {
  local i
  for ((i = 0; i < 300; i++)); do
    if timeout 30 redis-cli --cluster check "$1" >"$WORK/check.out" 2>&1 \
      && grep -q 'OK] All nodes agree about slots configuration' "$WORK/check.out" \
      && grep -q 'OK] All 16384 slots covered' "$WORK/check.out" \
      && ! grep -q 'WARNING\|ERR' "$WORK/check.out"; then
      return 0
    fi
    sleep 0.2
  done
  die "Redis Cluster: nodes do not agree within 60 s: $(tail -n 20 "$WORK/check.out")"
}

# redis_wait_ok PORT...: until each node says cluster_state:ok and knows them all; at most 60 s.
redis_wait_ok() {
  local i p n=$# ready
  for ((i = 0; i < 300; i++)); do
    ready=0
    for p in "$@"; do
      timeout 5 redis-cli -h "$HOST" -p "$p" cluster info 2>/dev/null | tr -d '\r' >"$WORK/info.out" || true
      grep -qx 'cluster_state:ok' "$WORK/info.out" && grep -qx "cluster_known_nodes:$n" "$WORK/info.out" \
        && ready=$((ready + 1))
    done
    ((ready == n)) && return 0
    sleep 0.2
  done
  die "Redis Cluster: not every node ok within 60 s: $(tr '\n' ' ' <"$WORK/info.out")"
}

# show_logs: the last warnings and errors of pliant's supervisor and nodes, to stderr.
show_logs() {
  local f
  shopt -s nullglob
  for f in "$WORK/up.log" "$WORK"/pcluster/node-*.log; do
    grep -HiE 'warn|error|panic|lease' "$f" 2>/dev/null | sed "s|^$WORK/||" | tail -n 8 >&2 || true
  done
  shopt -u nullglob
}

redis_dbsize() { timeout 30 redis-cli -h "$HOST" -p "$1" dbsize; }

run_redis() {
  local ports dir=$WORK/redis p i ready addrs=() t0 wall rc=0 new newid before after cpu0 cpu1
  mkdir -p "$dir"
  read -r -a ports <<<"$(free_cluster_ports 4)" || die "no free ports"
  for p in "${ports[@]}"; do
    redis-server --bind "$HOST" --port "$p" --dir "$dir" --logfile "$dir/redis-$p.log" \
      --daemonize no --save '' --appendonly yes --appendfsync everysec \
      --appenddirname "aof-$p" --dbfilename "dump-$p.rdb" \
      --cluster-enabled yes --cluster-config-file "$dir/nodes-$p.conf" >/dev/null 2>&1 </dev/null &
    REDIS_PIDS+=($!)
  done
  for ((i = 0; i < 200; i++)); do
    ready=0
    for p in "${ports[@]}"; do
      [[ $(timeout 2 redis-cli -h "$HOST" -p "$p" ping 2>/dev/null) == PONG ]] && ready=$((ready + 1))
    done
    ((ready == 4)) && break
    sleep 0.05
  done
  ((ready == 4)) || die "redis-server did not answer PING within 10 s"
  for p in "${ports[@]:0:3}"; do addrs+=("$HOST:$p"); done
  new=${ports[3]}
  timeout 120 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
    >"$WORK/create.out" 2>&1 </dev/null || die "redis-cli --cluster create failed: $(tail -n 20 "$WORK/create.out")"
  redis_wait_ok "${ports[@]:0:3}"
  redis_wait_agree "${addrs[0]}"
  log "Redis Cluster: 3 masters up (${addrs[*]})"
  load_keys redis "${addrs[0]}"
  timeout 120 redis-cli --cluster add-node "$HOST:$new" "${addrs[0]}" >"$WORK/add.out" 2>&1 </dev/null \
    || die "redis-cli --cluster add-node failed: $(tail -n 20 "$WORK/add.out")"
  redis_wait_ok "${ports[@]}"
  redis_wait_agree "${addrs[0]}"
  newid=$(timeout 5 redis-cli -h "$HOST" -p "$new" cluster myid | tr -d '\r')
  for step in commission decommission; do
    local extra=(--cluster-use-empty-masters)
    [[ $step == commission ]] || extra=(--cluster-weight "$newid=0")
    before=$(redis_dbsize "$new")
    log "Redis Cluster: idle $step: redis-cli --cluster rebalance ${addrs[0]} ${extra[*]}"
    cpu0=$(cpu_seconds "${REDIS_PIDS[@]}")
    t0=$(now)
    rc=0
    run_bounded "$MOVE_TIMEOUT" "$WORK/rebalance-$step.out" "$WORK/rebalance-$step.err" \
      redis-cli --cluster rebalance "${addrs[0]}" "${extra[@]}" || rc=$?
    wall=$(elapsed "$t0")
    cpu1=$(cpu_seconds "${REDIS_PIDS[@]}")
    ((rc == 0)) || die "redis-cli --cluster rebalance ($step) failed (status $rc): $(tail -n 20 "$WORK/rebalance-$step.out" "$WORK/rebalance-$step.err")"
    after=$(redis_dbsize "$new")
    redis_wait_agree "${addrs[0]}"
    python3 - "$REC/redis-idle-$step.json" "$step" "$wall" "$before" "$after" "$VALUE" \
      "$REC/idle-$step.json" "$WORK/rebalance-$step.out" "$KEYS" \
      "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }')" <<'EOF'
import json, re, sys
out, step, wall, before, after, value, pl, log = sys.argv[1:9]
cpu = float(sys.argv[10])
wall, before, after, value = float(wall), int(before), int(after), int(value)
moved = after - before if step == "commission" else before - after
# The mean length of the keys k:0 ... k:<KEYS-1>: bytes count key + value, as pliant's do.
n = int(sys.argv[9])
keylen = 2 + sum(len(str(i)) for i in range(n)) / n
slots = sum(int(x) for x in re.findall(r"^Moving (\d+) slots from", open(log).read(), flags=re.M))
try:
    t_t = json.load(open(pl)).get("t_t")
except OSError:
    t_t = None
json.dump({"system": "redis", "phase": f"idle {step}", "seconds": wall, "wall_seconds": wall,
           "keys_moved": moved, "bytes_moved": moved * (value + keylen), "slots_moved": slots,
           "t_t": t_t, "duration_over_t_t": wall / t_t if t_t else None,
           "new_node_keys_before": before, "new_node_keys_after": after,
           "cpu_seconds": cpu, "cpu_us_per_key": 1e6 * cpu / moved if moved else None},
          open(out, "w"), indent=1)
EOF
    log "Redis Cluster: idle $step: $wall s, new node's keys $before -> $after"
  done
  python3 "$HELPER" verify --seed "${addrs[0]}" --keys "$KEYS" --value "$VALUE" >"$REC/redis-verify.json" \
    || die "Redis: reading the keys back failed"
  stop_redis || FAILED=1
  rm -rf "$dir"
}

# ---------------------------------------------------------------------------------------------
PLIANT_VERSION=$("$PLIANT" --version)
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z ${PLIANT_BIN:-} ]] || GIT_REV="PLIANT_BIN=$PLIANT_BIN"
REDIS_VERSION=$(redis-server --version | awk '{ sub(/^v=/, "", $3); print $3 }')
log "$PLIANT_VERSION ($GIT_REV) and Redis $REDIS_VERSION; $KEYS keys of $VALUE bytes; work dir $WORK"
T_START=$(now)

start_pliant
load_keys pliant "$SEED"
for step in "idle commission" "idle decommission" "loaded commission" "loaded decommission"; do
  loaded=0
  [[ $step != loaded* ]] || loaded=1
  pliant_move "$step" "${step#* }" "$loaded" || { log "pliant: the later phases are skipped"; break; }
done
log "pliant: reading every key back"
python3 "$HELPER" verify --seed "$SEED" --keys "$KEYS" --value "$VALUE" >"$REC/pliant-verify.json" \
  || die "pliant: reading the keys back failed"
stop_pliant || FAILED=1
rm -rf "$WORK/pcluster"

if ((REDIS)); then run_redis; fi

python3 - "$REC" "$WORK/all.json" "$PLIANT_VERSION ($GIT_REV)" "$( ((REDIS)) && echo "$REDIS_VERSION")" \
  "$KEYS" "$VALUE" "$GET_CLIENTS" "$SET_CLIENTS" "$(elapsed "$T_START")" <<'EOF'
import json, os, sys
d, out, pv, rv, keys, value, gc, sc, wall = sys.argv[1:]
def rd(n):
    p = os.path.join(d, n)
    return json.load(open(p)) if os.path.exists(p) else None
phases = []
for tag in ("idle-commission", "idle-decommission", "loaded-commission", "loaded-decommission"):
    r = rd(f"{tag}.json")
    if r:
        phases.append(r)
for step in ("commission", "decommission"):
    r = rd(f"redis-idle-{step}.json")
    if r:
        phases.append(r)
        for p in phases:
            if p["system"] == "pliant" and p["phase"] == f"idle {step}":
                p["redis_seconds"] = r["seconds"]
                p["pliant_over_redis"] = p["seconds"] / r["seconds"] if r["seconds"] else None
json.dump({"pliant": pv, "redis": rv or None, "keys": int(keys), "value": int(value),
           "get_clients": int(gc), "set_clients": int(sc),
           "persistence": "pliant: each node's store, --durability everysec; Redis: AOF, appendfsync everysec, no RDB",
           "loads": {"pliant": rd("pliant-load.json"), "redis": rd("redis-load.json")},
           "verify": rd("pliant-verify.json"), "redis_verify": rd("redis-verify.json"),
           "phases": phases, "wall_seconds": float(wall)}, open(out, "w"), indent=1)
EOF
python3 "$HELPER" summary "$WORK/all.json"
[[ -z $JSON_OUT ]] || cp "$WORK/all.json" "$JSON_OUT"
python3 - "$WORK/all.json" <<'EOF' || FAILED=1
import json, sys
a = json.load(open(sys.argv[1]))
bad = []
for v, name in ((a["verify"], "pliant"), (a.get("redis_verify"), "redis")):
    if v and (v["missing"] or v["wrong"]):
        bad.append(f"{name}: {v['missing']} keys missing, {v['wrong']} wrong: {v['examples']}")
for p in a["phases"]:
    if p.get("failed"):
        bad.append(f"{p['system']} {p['phase']}: every attempt failed")
    for f in p.get("failed_attempts", []):
        bad.append(f"{p['system']} {p['phase']}: a `pliant scale` attempt failed: {f}")
    c = p.get("checker")
    if c and (c["lost"] or c["stale"] or c["errors"]):
        bad.append(f"{p['phase']}: checker lost {c['lost']}, stale {c['stale']}, errors {c['errors']}: {c['examples']} {c['first_errors']}")
for b in bad:
    print(f"rescale_scale: FAIL: {b}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
((FAILED == 0)) || die "see above"
log "PASS ($(elapsed "$T_START") s)"
