#!/usr/bin/env bash
# The Mantle balancer on a skewed cluster: a local `pliant cluster up --balancer
# cephfs-greedy-spill` where nine writes in ten go to the keys of one node, then: does the
# balancer visibly even the load out (slots move away from the hot node, its share of the load
# falls), does it then stop moving, and is every acknowledged write still there.
#
# What it measures
#   NODES nodes on loopback, every node running the policy cephfs-greedy-spill (or --policy)
#   every INTERVAL. Keys: HOT keys whose hash slot the first node of `cluster up`'s JSON (node 0,
#   the hot node) owns at start, OTHER keys owned by the other nodes (redis-py's key_slot against
#   the slot ranges `cluster up` printed). For DURATION seconds WRITERS threads, each with its own
#   redis-py RedisCluster client and its own disjoint share of the keys, SET as fast as they are
#   answered (or RATE ops/s per thread): nine SETs in ten to one of its hot keys, one in ten to one
#   of its other keys (seeded RNG), each value unique; each writer keeps the last acknowledged
#   value of every key. Any exception that reaches the caller is a client error (redis-py follows
#   MOVED and ASK and retries TRYAGAIN by itself: those are counted apart, not errors).
#   While the load runs, back to back (about one a second): `pliant cluster status ADDR --json
#   --window 1s` (ADDR: the first node that answers), each node's ops/s and slots: the timeline.
#   At the end of the load: every node's `PLIANT.BALANCER LOG 1000` (every decision: the loads it
#   saw, `when`, the targets, the slots moved), then the load stops, every key is read back
#   through RedisCluster and compared with the last acknowledged value, the logs are read once
#   more (a move after the load stopped is listed too), and the cluster is stopped by the pid of
#   `pliant cluster up`; no node process of it may be left.
#   The greedy spill: a node at least min_rebalance (default 10%) above the mean load for more
#   than two consecutive decisions, whose next node in id order is not, sends that neighbour
#   slots picked by their load, at most half its load and at most its excess over the mean. The
#   spill goes round the ring of ids (printed in the summary), so the load reaches the third node
#   through the second.
#
# How to read it
#   stdout: a markdown summary. PASS/FAIL and the checks: at least one move; no move in the last
#   third of the run (the balancer stopped: a move counts from its decision to its end); max/mean
#   of the nodes' ops/s over the last 10 s of samples below 1.25; no lost or wrong key; no client
#   error; no failed balancer decision (`error` in a log); the keys `cluster status` counts equal
#   the keys written, every slot assigned and none migrating at the end; the cluster stopped with
#   no node left. Then node 0's share of the load and max/mean at start (the first decision, on
#   any node, whose interval was all under load: the balancer's own loads, keyed commands/s; and
#   the first `cluster status` sample) and at the end (the mean of the timeline's last 10 s:
#   `cluster status` ops/s, every command; and the last decision's loads); the moves (count, time
#   of the last one, seconds without a move until the end of the load); how well the moves hit
#   their target: per move, realized / moved = (the mover's load at the deciding decision - its
#   load at its first decision, not skipped, after the move) / the load of the slots moved, every
#   load from the mover's own log (1: the load fell by what was picked; below: the slots carried
#   less than their measured load; moves of one decision share the value; a decision after the
#   load ended counts not), and its median over the moves; the decisions per node
#   (made, skipped and why, `when` true, moves, errors); a timeline table every ~5 s (per node
#   ops/s and slots, max/mean, node 0's share); the moves table (time since the load started,
#   from and to node index, slots, the load asked and the load of the slots moved, keys,
#   seconds, the strategy picked, the loads the decision saw, the mover's own load at that
#   decision and at its next one, and realized / moved). Node i is the i-th node of
#   `cluster up --json`. ops/s over 1 s windows from Python clients on a shared 2-core machine
#   are noisy (10-20% between samples): read max/mean over the 10 s means, not single rows.
#   Progress (one line about every 5 s, each move as the logs show it) goes to stderr.
#   --json FILE: the parameters, the timeline, every node's decisions, the moves, the checks and
#   the client counts. Exit status 0 only on PASS; on FAIL the nodes' warnings and errors from
#   their logs go to stderr.
#
# Usage
#   tools/bench/balancer.sh [--nodes N] [--duration S] [--interval DUR] [--writers N]
#                           [--rate OPS] [--hot-keys N] [--other-keys N] [--seed N]
#                           [--policy NAME|FILE] [--min-rebalance X] [--slot-window N]
#                           [--balancer-param KEY=VALUE]... [--json FILE] [--quick]
#   defaults: --nodes 3, --duration 90 (seconds of load), --interval 2s (--balancer-interval),
#   --writers 2, --rate 0 (ops/s per thread; 0: as fast as they go), --hot-keys 2000,
#   --other-keys 1000, --seed 1, --policy cephfs-greedy-spill. --min-rebalance X is
#   --balancer-param min_rebalance=X; --balancer-param goes to every node as it is.
#   --slot-window N: `cluster up ... -- --balancer-slot-window N` (the intervals over which a
#   node measures each slot's load to pick the slots it moves); not given: no such flag, the
#   server's default.
#   --quick: --duration 30 --interval 1s (a smoke test, about a minute); flags given explicitly
#   win.
#   env: PLIANT_BIN (the pliant binary; default target/release/pliant, which this script does not
#   build: run `cargo build --release` first).
#
# Installs what is missing (as root: python3-venv with apt-get; redis-py into the virtual
# environment target/compat-venv, as tools/compat/*.sh do), or names it and stops. Loopback
# only, ports picked at run time (--base-port 0); the cluster is stopped by the pid of `pliant
# cluster up` (which stops its nodes), and no node of it may be left running; every wait is
# bounded; the temp dir (cluster, stores, logs) is removed at exit.

set -euo pipefail

PARAMS=()
NODES="" DURATION="" INTERVAL="" WRITERS="" RATE="" HOT="" OTHER="" SEED="" POLICY=""
SLOT_WINDOW=""
JSON_OUT="" QUICK=0
need() { [[ $# -ge 2 ]] || { echo "balancer.sh: $1 needs a value" >&2; exit 2; }; }
while (($#)); do
  case "$1" in
    --nodes) need "$@"; NODES=$2; shift ;;
    --duration) need "$@"; DURATION=$2; shift ;;
    --interval) need "$@"; INTERVAL=$2; shift ;;
    --writers) need "$@"; WRITERS=$2; shift ;;
    --rate) need "$@"; RATE=$2; shift ;;
    --hot-keys) need "$@"; HOT=$2; shift ;;
    --other-keys) need "$@"; OTHER=$2; shift ;;
    --seed) need "$@"; SEED=$2; shift ;;
    --policy) need "$@"; POLICY=$2; shift ;;
    --min-rebalance) need "$@"; PARAMS+=("min_rebalance=$2"); shift ;;
    --balancer-param) need "$@"; PARAMS+=("$2"); shift ;;
    --slot-window) need "$@"; SLOT_WINDOW=$2; shift ;;
    --json) need "$@"; JSON_OUT=$(realpath -m -- "$2"); shift ;;
    --quick) QUICK=1 ;;
    -h | --help)
      sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) echo "balancer.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if ((QUICK)); then
  DURATION=${DURATION:-30} INTERVAL=${INTERVAL:-1s}
fi
NODES=${NODES:-3} DURATION=${DURATION:-90} INTERVAL=${INTERVAL:-2s} WRITERS=${WRITERS:-2}
RATE=${RATE:-0} HOT=${HOT:-2000} OTHER=${OTHER:-1000} SEED=${SEED:-1}
POLICY=${POLICY:-cephfs-greedy-spill}
for v in NODES DURATION WRITERS HOT OTHER; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "balancer.sh: $v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
((NODES >= 2 && NODES <= 16)) || { echo "balancer.sh: --nodes between 2 and 16" >&2; exit 2; }
((DURATION >= 15 && DURATION <= 3600)) || { echo "balancer.sh: --duration between 15 and 3600 s" >&2; exit 2; }
[[ -z $SLOT_WINDOW || $SLOT_WINDOW =~ ^[1-9][0-9]*$ ]] \
  || { echo "balancer.sh: --slot-window must be a positive integer (got '$SLOT_WINDOW')" >&2; exit 2; }
[[ $SEED =~ ^[0-9]+$ ]] || { echo "balancer.sh: --seed must be a non-negative integer" >&2; exit 2; }
[[ $RATE =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "balancer.sh: --rate must be a number" >&2; exit 2; }
[[ $INTERVAL =~ ^[0-9]+(\.[0-9]+)?(ms|s)?$ ]] || { echo "balancer.sh: --interval like 2s or 500ms" >&2; exit 2; }
for p in ${PARAMS[@]+"${PARAMS[@]}"}; do
  [[ $p == ?*=* ]] || { echo "balancer.sh: --balancer-param KEY=VALUE (got '$p')" >&2; exit 2; }
done
[[ $POLICY != */* ]] || POLICY=$(realpath -m -- "$POLICY")

[[ -z ${PLIANT_BIN:-} ]] || PLIANT_BIN=$(realpath -m -- "$PLIANT_BIN")
cd "$(dirname "$0")/../.."
fail() { echo "balancer.sh: $*" >&2; exit 1; }

source tools/lib/clients.sh
need_apt python3 python3
need_apt coreutils timeout
need_redis_py
venv=target/compat-venv
py=$venv/bin/python

src_bin=${PLIANT_BIN:-target/release/pliant}
[[ -x $src_bin ]] || fail "$src_bin is not an executable (build it: cargo build --release; or set PLIANT_BIN)"
"$src_bin" serve --help 2>/dev/null | grep -q -- '--balancer' \
  || fail "$src_bin has no --balancer (an older build? cargo build --release)"

tmp=$(mktemp -d -t pliant-balancer.XXXXXX)
up_pid='' drv_pid=''
# A private copy: a concurrent `cargo build` must not swap the binary under the running nodes.
bin=$tmp/pliant
cp "$src_bin" "$bin"
cdir=$tmp/cluster

alive() { # alive PID: the process runs (and is not a zombie waiting to be reaped)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Pids of the processes still running with the cluster's directory on their command line: its
# nodes (each has --store DIR/node-i).
cluster_procs() {
  local d c
  for d in /proc/[0-9]*; do
    c=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") || continue
    [[ $c == *" serve "*"$cdir/"* ]] || continue
    alive "${d#/proc/}" && echo "${d#/proc/}"
  done
  return 0
}

# SIGTERM to `pliant cluster up` by its pid; waits (at most 40 s: it gives each node 15 s) for
# it, then checks that no node of the cluster still runs (by the pids its JSON named, and by the
# cluster directory on a command line). Each problem is a line in $tmp/stop.txt (none: clean);
# anything left is killed by its pid.
stop_cluster() {
  [ -n "$up_pid" ] || return 0
  local pid=$up_pid status=0 n left t0=$SECONDS
  up_pid=
  : >"$tmp/stop.txt"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 400); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    echo "pliant cluster up ($pid) did not stop within 40 s; killed" >>"$tmp/stop.txt"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || status=$?
  if [ "$status" != 0 ]; then
    echo "pliant cluster up exited with status $status: $(tail -n 5 "$tmp/up.log" | tr '\n' ' ')" >>"$tmp/stop.txt"
  fi
  left=$(cluster_procs)
  for n in $("$py" -c 'import json,sys; print(" ".join(map(str, json.loads(open(sys.argv[1]).readline()).get("pids", []))))' \
    "$tmp/up.json" 2>/dev/null || true); do
    alive "$n" && tr '\0' ' ' 2>/dev/null <"/proc/$n/cmdline" | grep -qF "$cdir/" && left="$left $n"
  done
  for n in $(tr ' ' '\n' <<<"$left" | sort -u); do
    echo "node $n ($(tr '\0' ' ' 2>/dev/null <"/proc/$n/cmdline")) still ran after pliant cluster up stopped; killed" >>"$tmp/stop.txt"
    kill -KILL "$n" 2>/dev/null || true
  done
  echo "balancer.sh: cluster stopped in $((SECONDS - t0)) s$([ -s "$tmp/stop.txt" ] && echo ", not cleanly: $(cat "$tmp/stop.txt")")" >&2
  [ ! -s "$tmp/stop.txt" ]
}

# The nodes' and the supervisor's warnings and errors (the last 40), for a failed run.
show_logs() {
  local f lines
  shopt -s nullglob
  lines=$(for f in "$tmp/up.log" "$cdir"/node-*.log; do
    grep -HiE 'warn|error|panic' "$f" 2>/dev/null | sed "s|^$tmp/||" || true
  done | tail -n 40)
  shopt -u nullglob
  echo "${lines:-(none)}" >&2
}

# The driver, if it still runs (an interrupt): SIGTERM by its pid, at most 20 s, then SIGKILL.
stop_driver() {
  [ -n "$drv_pid" ] || return 0
  local pid=$drv_pid
  drv_pid=
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? ok=0
  trap - EXIT
  stop_driver
  stop_cluster || ok=1
  rm -rf "$tmp"
  if [ "$ok" != 0 ]; then
    echo "balancer.sh: FAIL: the cluster did not stop cleanly" >&2
    [ "$rc" != 0 ] || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

up_args=(cluster up --nodes "$NODES" --base-port 0 --json --dir "$cdir" --balancer "$POLICY"
  --balancer-interval "$INTERVAL")
drv_params=()
for p in ${PARAMS[@]+"${PARAMS[@]}"}; do up_args+=(--balancer-param "$p"); drv_params+=(--param "$p"); done
# Flags after `--` go to every `pliant serve`: last.
if [ -n "$SLOT_WINDOW" ]; then
  "$bin" serve --help 2>/dev/null | grep -q -- '--balancer-slot-window' \
    || fail "$src_bin has no --balancer-slot-window (an older build? cargo build --release)"
  up_args+=(-- --balancer-slot-window "$SLOT_WINDOW")
  drv_params+=(--slot-window "$SLOT_WINDOW")
fi
echo "balancer.sh: pliant ${up_args[*]}" >&2
: >"$tmp/up.json" # there before the loop below reads it
"$bin" "${up_args[@]}" >"$tmp/up.json" 2>"$tmp/up.log" </dev/null &
up_pid=$!
# Its first line, once every node serves the map (at most 60 s).
for _ in $(seq 1 600); do
  [ "$(wc -l <"$tmp/up.json")" -ge 1 ] && break
  alive "$up_pid" || break
  sleep 0.1
done
[ "$(wc -l <"$tmp/up.json")" -ge 1 ] \
  || fail "pliant cluster up did not come up within 60 s: $(tail -n 20 "$tmp/up.log")"

# The driver bounds each command and its load threads; this bounds the whole. In the
# background, so that an interrupt reaches this script's trap at once (which stops the driver
# by its pid).
limit=$((DURATION + 600))
timeout "$limit" "$py" tools/bench/balancer.py run --bin "$bin" --up "$tmp/up.json" \
  --out "$tmp/run.json" --duration "$DURATION" --interval "$INTERVAL" \
  --writers "$WRITERS" --rate "$RATE" --hot-keys "$HOT" --other-keys "$OTHER" --seed "$SEED" \
  --policy "$POLICY" ${drv_params[@]+"${drv_params[@]}"} &
drv_pid=$!
rc=0
wait "$drv_pid" || rc=$?
drv_pid=
[ "$rc" != 124 ] || echo "balancer.sh: FAIL: the driver did not finish within $limit s" >&2
stop_ok=0
stop_cluster || stop_ok=1
[ -f "$tmp/run.json" ] || { show_logs; fail "FAIL: the driver wrote no result (exit status $rc)"; }
# The summary, with the cluster's stop among the checks.
rc2=0
"$py" tools/bench/balancer.py report --run "$tmp/run.json" --stop "$tmp/stop.txt" \
  ${JSON_OUT:+--json "$JSON_OUT"} || rc2=$?
if [ "$rc" != 0 ] || [ "$rc2" != 0 ] || [ "$stop_ok" != 0 ]; then
  echo "balancer.sh: warnings and errors in the cluster's logs:" >&2
  show_logs
  fail "FAIL (see above)"
fi
echo "balancer.sh: PASS" >&2
