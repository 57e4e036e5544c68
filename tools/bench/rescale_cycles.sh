#!/usr/bin/env bash
# Live rescaling under load (issue 12, "Must show", first two bullets): random commission and
# decommission cycles of a local `pliant cluster up` (embedded coordination store, or with
# --etcd the cluster's state in an etcd this script starts) between 2 and 8 nodes while
# redis-py's RedisCluster writes and reads, then: is every acknowledged write there, did any
# client operation fail, how long did each rescale take against the planner's T_t, and how
# balanced are data and load afterwards.
#
# What it measures
#   A 3-node cluster on loopback; KEYS keys (values of 16-240 bytes carrying a per-key counter)
#   written once, then continuous load from WRITERS + READERS threads, each with its own
#   RedisCluster client, RATE ops/s per thread. Writers own disjoint shares of the keys, SET each
#   with the next counter and log every acknowledged SET in order (the write log); now and then
#   they read one of their keys back. Readers GET random keys. Every read must return a value
#   that was written (counter at most the highest sent, body derived from key and counter) and
#   not older than the last write of that key acknowledged before the GET was sent.
#   CYCLES cycles (seeded RNG): at 2 nodes a commission, at 8 a decommission, else either; a
#   commission adds 1-3 nodes (never above 8), a decommission removes 1-3 random nodes (never
#   below 2); the strategy alternates lt (odd cycles), ldt (even cycles). Each cycle runs
#   `pliant scale commission|decommission --json` (the report: planned T_t, seconds, bytes and
#   keys moved, the planner's L_max/L_t and D_max/D_t, the bandwidth it measured on loopback),
#   then `pliant cluster status --json --window 1s` with the load running: measured D_max/D_t
#   (max over mean of the owners' memory_bytes, and of their keys) and L_max/L_t (of their
#   ops_per_s); the owners must be the report's nodes, every slot assigned, none migrating,
#   decommissioned nodes' processes gone, and every node process of the cluster a slot owner.
#   Before the first cycle and after the last (load stopped): the sha256 of all sorted key/value
#   pairs read through the cluster equals that of the write log's last value per key, and the
#   keys `cluster status` counts over the nodes equal the distinct keys written.
#   --etcd: the same cycles and checks with the cluster's state (map, leases) in etcd: Debian's
#   etcd-server, one member on free loopback ports with its data in the temp dir, started
#   before `pliant cluster up --etcd URL` and stopped (by its pid) after it. No supervisor then
#   starts or stops nodes for `pliant scale`, so the driver does, as an operator would: before a
#   commission of K it starts K `pliant serve --etcd URL --bind 127.0.0.1:0 --store
#   DIR/extra-<n> --node-id ID` (each its own store and log) and waits until they are live
#   members (the commission takes any live node the map does not name; the report's added
#   nodes must be exactly these); after a decommission (which only takes the nodes out of the
#   map and names them in `not_stopped`) it SIGTERMs each removed node's process by its pid (an
#   extra one, or one of `pliant cluster up`: ids from DIR/node-<i>.id, pids from its --json;
#   its supervisor then logs that node as exited), waits for it to exit (30 s, then SIGKILL:
#   a failure) and for its lease to be gone (a lease left behind would look like an idle node
#   to the next commission). The summary adds the node processes started and stopped and how
#   long starting (until joined) and stopping (until the lease is gone) took.
#
# How to read it
#   stdout: a markdown summary: PASS/FAIL, the checks (cycles run, failures, checksums equal,
#   key totals equal, acknowledged writes and checked reads, client errors, stale/never-written/
#   missing reads, MOVED followed and topology re-reads by redis-py and ASKs to a node it did
#   not know yet (see --strict-client): those are redirects the client followed, not errors;
#   cycles after which the node asked still showed the old map for a moment: it learns the map
#   by watch, so it is polled for at most 15 s), the wall time per cycle, then per strategy
#   the medians (and p90) of seconds/T_t, of measured and planned D_max/D_t and L_max/L_t.
#   seconds/T_t is far above 1 when moves are small: T_t counts bytes over the measured
#   bandwidth only, the mover also pays per-slot round trips and map updates. Measured L is
#   noisier than planned L: the planner sees each slot's ops over one --window, and with a few
#   keys per slot that sample is small. Progress (one line per cycle) and FAIL lines
#   go to stderr. --json FILE: every cycle with its full report, the checks, the client counts
#   and the first client errors and wrong reads. Exit status 0 only if nothing failed; any
#   failure (a pliant command failing: its exact command, stderr and cycle; a lost or wrong
#   write; a checksum or key-count mismatch; a client error) is named on stderr and in the
#   summary, with the nodes' warnings and errors from their logs.
#
# Usage
#   tools/bench/rescale_cycles.sh [--cycles N] [--seed N] [--json FILE] [--quick]
#                                 [--keys N] [--value-size BYTES] [--writers N] [--readers N]
#                                 [--rate OPS] [--window DUR] [--parallel N] [--strict-client] [--etcd]
#   defaults: --cycles 100, --seed 1, --keys 4000, --writers 3, --readers 3, --rate 150 (ops/s
#   per thread; 0: as fast as they go), --window 2s and --parallel 4 (of pliant scale).
#   --value-size BYTES: every value that long (counter and key included) instead of 16-240
#   bytes of filler (issue 34 runs the cycles with 10 KiB values: --value-size 10240).
#   --quick: 5 cycles, 1,000 keys, 2 writers and 2 readers at 100 ops/s, --window 1s (a smoke
#   test, under 2 minutes); flags given explicitly win.
#   --strict-client: redis-py exactly as installed. By default the driver patches one known
#   redis-py bug (redis/redis-py#2432, still in 6.4): an -ASK to a node that is not in its
#   topology cache yet (a node being commissioned owns no slot until its first move ends) raises
#   AttributeError instead of being followed; the patch adds the node to the cache as redis-py
#   does for a MOVED to an unknown node, and the summary counts how often it was needed. With
#   --strict-client each such ASK is a client error, and the run fails.
#   --etcd: the cluster's state in etcd (see above; needs a pliant built with `--features etcd`,
#   as `cargo build --release --all-features` makes it). Without it: the embedded store.
#   env: PLIANT_BIN (a pliant binary to test instead of building target/release/pliant).
#
# Installs what is missing (as root: python3-venv, and with --etcd etcd-server and curl, with
# apt-get; redis-py into the virtual environment target/compat-venv, as tools/compat/*.sh do),
# or names it and stops. Loopback only, ports picked at run time; the cluster is stopped by the
# pid of `pliant cluster up` (which stops its nodes; with --etcd the driver first stops the
# nodes it started), and no node of it may be left running; etcd is stopped by its pid after
# the cluster; every wait is bounded; the temp dir (cluster, stores, logs, etcd's data) is
# removed at exit.

set -euo pipefail

EXTRA=()
VALUE_SIZE=0 CYCLES="" SEED="" JSON_OUT="" QUICK=0 ETCD=0 KEYS="" WRITERS="" READERS="" RATE="" WINDOW="" PARALLEL=""
need() { [[ $# -ge 2 ]] || { echo "rescale_cycles.sh: $1 needs a value" >&2; exit 2; }; }
while (($#)); do
  case "$1" in
    --cycles) need "$@"; CYCLES=$2; shift ;;
    --seed) need "$@"; SEED=$2; shift ;;
    --json) need "$@"; JSON_OUT=$(realpath -m -- "$2"); shift ;;
    --quick) QUICK=1 ;;
    --keys) need "$@"; KEYS=$2; shift ;;
    --value-size) need "$@"; VALUE_SIZE=$2; shift ;;
    --writers) need "$@"; WRITERS=$2; shift ;;
    --readers) need "$@"; READERS=$2; shift ;;
    --rate) need "$@"; RATE=$2; shift ;;
    --window) need "$@"; WINDOW=$2; shift ;;
    --parallel) need "$@"; PARALLEL=$2; shift ;;
    --strict-client) EXTRA+=(--strict-client) ;;
    --etcd) ETCD=1 ;;
    -h | --help)
      sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) echo "rescale_cycles.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if ((QUICK)); then
  CYCLES=${CYCLES:-5} KEYS=${KEYS:-1000} WRITERS=${WRITERS:-2} READERS=${READERS:-2}
  RATE=${RATE:-100} WINDOW=${WINDOW:-1s}
fi
CYCLES=${CYCLES:-100} SEED=${SEED:-1} KEYS=${KEYS:-4000} WRITERS=${WRITERS:-3}
READERS=${READERS:-3} RATE=${RATE:-150} WINDOW=${WINDOW:-2s} PARALLEL=${PARALLEL:-4}
for v in CYCLES KEYS WRITERS READERS PARALLEL; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "rescale_cycles.sh: $v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
[[ $VALUE_SIZE =~ ^[0-9]+$ ]] && ((VALUE_SIZE <= 1048576)) || { echo "rescale_cycles.sh: --value-size must be 0 to 1048576 bytes" >&2; exit 2; }
[[ $SEED =~ ^[0-9]+$ ]] || { echo "rescale_cycles.sh: --seed must be a non-negative integer" >&2; exit 2; }
[[ $RATE =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "rescale_cycles.sh: --rate must be a number" >&2; exit 2; }
[[ $WINDOW =~ ^[0-9]+(ms|s)$ ]] || { echo "rescale_cycles.sh: --window like 2s or 500ms" >&2; exit 2; }
((CYCLES <= 10000)) || { echo "rescale_cycles.sh: --cycles at most 10000" >&2; exit 2; }

[[ -z ${PLIANT_BIN:-} ]] || PLIANT_BIN=$(realpath -m -- "$PLIANT_BIN")
cd "$(dirname "$0")/../.."
fail() { echo "rescale_cycles.sh: $*" >&2; exit 1; }

source tools/lib/clients.sh
need_apt python3 python3
need_apt coreutils timeout
need_redis_py
if ((ETCD)); then
  need_apt etcd-server etcd
  need_apt curl curl
fi
venv=target/compat-venv
py=$venv/bin/python

if [[ -n ${PLIANT_BIN:-} ]]; then
  [[ -x $PLIANT_BIN ]] || fail "PLIANT_BIN=$PLIANT_BIN is not an executable"
  src_bin=$PLIANT_BIN
else
  command -v cargo >/dev/null || fail "needs cargo"
  cargo build --release --locked -q || fail "cargo build --release --locked failed"
  src_bin=target/release/pliant
fi

tmp=$(mktemp -d -t pliant-rescale.XXXXXX)
up_pid='' drv_pid='' etcd_pid='' etcd_url=''
# A private copy: a concurrent `cargo build` must not swap the binary the supervisor starts
# new nodes from in the middle of the run.
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
# it, then checks that no node of the cluster still runs. Fails if anything had to be killed.
stop_cluster() {
  [ -n "$up_pid" ] || return 0
  local pid=$up_pid ok=0 status=0 n left
  up_pid=
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 400); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    echo "rescale_cycles.sh: pliant cluster up ($pid) did not stop within 40 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    ok=1
  fi
  wait "$pid" 2>/dev/null || status=$?
  if [ "$ok" = 0 ] && [ "$status" != 0 ]; then
    echo "rescale_cycles.sh: pliant cluster up exited with $status: $(tail -n 5 "$tmp/up.log")" >&2
    ok=1
  fi
  left=$(cluster_procs)
  for n in $left; do
    if ((ETCD)); then
      # A node the driver started and did not stop (it was killed): SIGTERM first, so that it
      # leaves etcd cleanly, then as below.
      echo "rescale_cycles.sh: node $n ($(tr '\0' ' ' 2>/dev/null <"/proc/$n/cmdline")) still runs after pliant cluster up stopped; stopping it" >&2
      kill -TERM "$n" 2>/dev/null || true
      for _ in $(seq 1 150); do
        alive "$n" || break
        sleep 0.1
      done
      ok=1
      alive "$n" || continue
    fi
    echo "rescale_cycles.sh: node $n ($(tr '\0' ' ' 2>/dev/null <"/proc/$n/cmdline")) still runs after pliant cluster up stopped; killing it" >&2
    kill -KILL "$n" 2>/dev/null || true
    ok=1
  done
  return "$ok"
}

# etcd (--etcd): one member on two free loopback ports (picked by binding port 0; another
# program may take one in between: then it starts again on others, at most 3 times), its data
# in the temp dir; healthy within 30 s.
start_etcd() {
  local p1 p2 try
  for try in 1 2 3; do
    read -r p1 p2 < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
    rm -rf "$tmp/etcd"
    etcd --name default --data-dir "$tmp/etcd" \
      --listen-client-urls "http://127.0.0.1:$p1" --advertise-client-urls "http://127.0.0.1:$p1" \
      --listen-peer-urls "http://127.0.0.1:$p2" --initial-advertise-peer-urls "http://127.0.0.1:$p2" \
      --initial-cluster "default=http://127.0.0.1:$p2" --initial-cluster-state new \
      >>"$tmp/etcd.log" 2>&1 </dev/null &
    etcd_pid=$!
    for _ in $(seq 1 300); do
      if curl -fsS --noproxy '*' --max-time 2 "http://127.0.0.1:$p1/health" 2>/dev/null \
        | grep -q '"health": *"true"'; then
        etcd_url=http://127.0.0.1:$p1
        return 0
      fi
      alive "$etcd_pid" || break
      sleep 0.1
    done
    echo "rescale_cycles.sh: etcd (try $try, ports $p1 $p2) did not become healthy: $(tail -n 3 "$tmp/etcd.log")" >&2
    stop_etcd || true
  done
  fail "etcd did not start (see above)"
}

# SIGTERM to etcd by its pid; at most 10 s, then SIGKILL (a failure).
stop_etcd() {
  [ -n "$etcd_pid" ] || return 0
  local pid=$etcd_pid ok=0
  etcd_pid=
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    echo "rescale_cycles.sh: etcd ($pid) did not stop within 10 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    ok=1
  fi
  wait "$pid" 2>/dev/null || true
  return "$ok"
}

# The nodes' and the supervisor's warnings and errors (the last 40), for a failed run.
show_logs() {
  local f lines
  shopt -s nullglob
  lines=$(for f in "$tmp/up.log" "$cdir"/node-*.log "$cdir"/extra-*.log; do
    grep -HiE 'warn|error|panic' "$f" 2>/dev/null | sed "s|^$tmp/||" || true
  done | tail -n 40)
  if ((ETCD)); then # etcd's own errors (capnslog: "E |", "C |"), not its warnings
    lines+=$'\n'$(grep -HE ' [EC] \| |panic' "$tmp/etcd.log" 2>/dev/null | sed "s|^$tmp/||" | tail -n 10)
  fi
  shopt -u nullglob
  echo "${lines:-(none)}" >&2
}

# The driver, if it still runs (an interrupt): SIGTERM by its pid (the driver kills the pliant
# command it waits for), at most 20 s, then SIGKILL.
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
  stop_etcd || ok=1
  rm -rf "$tmp"
  if [ "$ok" != 0 ]; then
    echo "rescale_cycles.sh: FAIL: the cluster did not stop cleanly" >&2
    [ "$rc" != 0 ] || rc=1
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

COORD=()
if ((ETCD)); then
  start_etcd
  COORD=(--etcd "$etcd_url")
fi
"$bin" cluster up --nodes 3 --base-port 0 --json --dir "$cdir" ${COORD[@]+"${COORD[@]}"} \
  >"$tmp/up.json" 2>"$tmp/up.log" </dev/null &
up_pid=$!
# Its first line, once every node serves the map (at most 60 s).
for _ in $(seq 1 600); do
  [ "$(wc -l <"$tmp/up.json")" -ge 1 ] && break
  alive "$up_pid" || break
  sleep 0.1
done
[ "$(wc -l <"$tmp/up.json")" -ge 1 ] \
  || fail "pliant cluster up did not come up within 60 s: $(tail -n 20 "$tmp/up.log")"

# The driver bounds each command (10 min per rescale, 2 min per status) and its load threads;
# this bounds the whole. In the background, so that an interrupt reaches this script's trap
# at once (which stops the driver by its pid).
limit=$((CYCLES * 900 + 1200))
timeout "$limit" "$py" tools/bench/rescale_cycles.py --bin "$bin" --up "$tmp/up.json" \
  --dir "$cdir" --cycles "$CYCLES" --seed "$SEED" ${JSON_OUT:+--json "$JSON_OUT"} \
  --keys "$KEYS" --value-size "$VALUE_SIZE" --writers "$WRITERS" --readers "$READERS" --rate "$RATE" --window "$WINDOW" \
  --parallel "$PARALLEL" ${EXTRA[@]+"${EXTRA[@]}"} ${COORD[@]+"${COORD[@]}"} &
drv_pid=$!
rc=0
wait "$drv_pid" || rc=$?
drv_pid=
if [ "$rc" != 0 ]; then
  [ "$rc" != 124 ] || echo "rescale_cycles.sh: FAIL: the driver did not finish within $limit s" >&2
  echo "rescale_cycles.sh: warnings and errors in the cluster's logs:" >&2
  show_logs
fi
stop_cluster || fail "the cluster did not stop cleanly"
stop_etcd || fail "etcd did not stop cleanly"
[ "$rc" = 0 ] || fail "FAIL (see above)"
echo "rescale_cycles.sh: PASS" >&2
