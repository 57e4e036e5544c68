#!/usr/bin/env bash
# A 3-node `pliant cluster up` against a 3-node Redis Cluster on this machine: redis-benchmark
# --cluster throughput (issue 12: "redis-benchmark --cluster against a 3-node cluster, beside Redis
# Cluster's own"; the goal is pliant/redis >= 1.0 in every cell).
#
# What it measures
#   Throughput: redis-benchmark --cluster (50 clients, 100-byte values, -t set,get, keys drawn at
#   random from KEYSPACE keys with -r so GET mostly hits keys the SET phase wrote), pointed at the
#   first node, against
#     pliant  `pliant cluster up --nodes 3 --base-port 0 --json -- --no-store`: a supervisor that
#             holds the coordination store and 3 `pliant serve --coord` nodes, ports its own pick
#     redis   3 `redis-server --cluster-enabled yes --save '' --appendonly no` on free ports picked
#             at run time (port P and its cluster bus, P+10000), joined with `redis-cli --cluster
#             create --cluster-replicas 0`, used once `cluster info` shows cluster_state:ok on all
#   both without persistence, with the 16,384 slots split the same way (0-5460, 5461-10922,
#   10923-16383), at -P 1 (one request per round trip) and -P 16 (pipelined). N requests per -P 1
#   run, N16 per -P 16 run. redis-benchmark spreads its clients over the masters round-robin and
#   gives each client's keys a hash tag of a slot its master owns, so a run sends no request to the
#   wrong node unless the map changes (a MOVED or ASK makes it fetch the map again, reported below
#   as an anomaly). The two systems run alternately, one at a time, ROUNDS times; the order flips
#   every round so slow drift on a shared machine hits both alike.
#   Each (round, -P, system) gets a freshly started cluster, as vs_redis.sh gives every cell a fresh
#   server: it keeps cells independent of each other and of their order (a cluster reused for the
#   -P 16 run would carry the -P 1 run's keys into it, and later rounds would be measured on fuller
#   nodes than earlier ones). The price is the start, outside the measurement: ~0.5 s for pliant's,
#   ~2.5-3.5 s for Redis Cluster's (mostly redis-cli --cluster create waiting for the nodes to
#   gossip); a default run takes ~3 minutes.
#   redis-benchmark --cluster runs one client thread per master (3 here), and with threads it ends
#   a run only on its 250 ms throughput timer: a figure is N / (elapsed rounded up to a multiple of
#   0.25 s), so one tick is 0.25 s / elapsed of it (~5% at the defaults, ~20-50% under --quick; the
#   output says how much for the shortest run). Keep every run at several seconds (N, N16) for
#   ratios finer than that.
#
# How to read it
#   stdout: a markdown table, one row per cell, the MEDIAN ops/s of each cluster over the rounds
#   and pliant/redis (above 1: pliant is faster). Every round's figures, each cluster's start time
#   and the keys each node held after each run go to stderr at the end (and to --json FILE). The
#   machine is small and shared: 2 cores carry 3 nodes and redis-benchmark's 3 threads (it needs
#   a core of its own), so the nodes of either system compete with each other and with the client;
#   each redis-server is single-threaded while each pliant node's tokio runtime may use both cores.
#   Read the ratios as "on this box" figures, with PIN=1 to give the nodes one core and the client
#   the other. Differences under ~10% are within the noise of one run.
#
# Usage
#   tools/bench/vs_redis_cluster.sh [--quick] [--json FILE]
#   env: ROUNDS (3), N (300000), N16 (2000000), KEYSPACE (100000),
#        PIN (0; 1 = every node on CPU 0, redis-benchmark on CPU 1), BENCH_TIMEOUT (600 s),
#        PLIANT_BIN (a pliant binary to measure instead of building target/release/pliant)
#   --quick: ROUNDS=1, N=20000, N16=100000 (a smoke test, under a minute).
#
# Needs redis-server, redis-cli, redis-benchmark (apt-get install redis-server redis-tools),
# python3, cargo. Listens on 127.0.0.1 only, on ports picked at run time; everything it writes
# lives in a temp dir removed at exit; every process it starts is stopped by its pid at exit
# (pliant's nodes by their supervisor, checked by their pids afterwards).

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
    ROUNDS=${ROUNDS:-1} N=${N:-20000} N16=${N16:-100000}
fi
ROUNDS=${ROUNDS:-3}
N=${N:-300000}
N16=${N16:-2000000}
KEYSPACE=${KEYSPACE:-100000}
PIN=${PIN:-0}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
CLIENTS=50
VALUE_SIZE=100
NODES=3
HOST=127.0.0.1

for v in ROUNDS N N16 KEYSPACE BENCH_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
for c in redis-server redis-cli redis-benchmark python3 cargo timeout; do
    command -v "$c" >/dev/null || { echo "missing $c (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
done

log() { printf '%s\n' "$*" >&2; }
die() { log "vs_redis_cluster: $*"; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/lib/redis_cluster.sh
source "$ROOT/tools/lib/redis_cluster.sh"
WORK=$(mktemp -d -t pliant-vs-redis-cluster.XXXXXX)
CLUSTER_KIND=""  # the one cluster running (never more than one at a time): pliant|redis
SUP_PID=""       # pliant: the `pliant cluster up` supervisor (our child)
NODE_PIDS=()     # pliant: its nodes (its children, not ours); redis: the redis-servers (ours)
NODE_PORTS=()    # every node's port; the first is the one redis-benchmark is pointed at
CLUSTER_DIR=""
CLUSTER_LOG=""   # pliant: the supervisor's stderr
ANOMALIES="$WORK/anomalies.txt"
: >"$ANOMALIES"

# Whether pid $1 is running (a zombie awaiting `wait` is not).
alive() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [[ ${s%% *} != Z ]]
}

# Whether pid $1 runs the executable $2 (guards a kill against a pid reused by another process).
runs_exe() {
    [[ $(readlink "/proc/$1/exe" 2>/dev/null) == "$2" ]]
}

# The pids of pid $1's children.
children_of() {
    cat "/proc/$1/task/"*/children 2>/dev/null || true
}

# Wait (at most $2 tenths of a second) until none of the pids $3... runs; 0 if none does.
wait_gone() {
    local tenths=$1 i pid any
    shift 1
    for ((i = 0; i <= tenths; i++)); do
        any=0
        for pid in "$@"; do
            if alive "$pid"; then any=1; break; fi
        done
        ((any)) || return 0
        ((i == tenths)) || sleep 0.1
    done
    return 1
}

# Stop the running cluster with SIGTERM, waiting at most 60 s before SIGKILL; reap what is ours,
# check how it stopped and remove its dir.
#   pliant: SIGTERM to the supervisor, which stops its nodes (SHUTDOWN each, killing one only
#           after 15 s) and exits; then every node pid must be gone.
#   redis:  SIGTERM to each redis-server.
stop_cluster() {
    [[ -n $CLUSTER_KIND ]] || return 0
    local kind=$CLUSTER_KIND sup=$SUP_PID pid rc=0 i log
    local nodes=("${NODE_PIDS[@]}")
    CLUSTER_KIND=""
    SUP_PID=""
    NODE_PIDS=()
    if [[ $kind == pliant ]]; then
        if [[ -n $sup ]]; then
            # Its nodes, should it stop before printing them (or need a kill).
            # shellcheck disable=SC2207
            nodes+=($(children_of "$sup"))
            kill -TERM "$sup" 2>/dev/null || true
            if ! wait_gone 600 "$sup"; then
                echo "pliant cluster up (pid $sup) still running 60 s after SIGTERM; killed" >>"$ANOMALIES"
                # shellcheck disable=SC2207
                nodes+=($(children_of "$sup"))
                kill -KILL "$sup" 2>/dev/null || true
            fi
        fi
        if ((${#nodes[@]})) && ! wait_gone 50 "${nodes[@]}"; then
            for pid in "${nodes[@]}"; do
                if alive "$pid" && runs_exe "$pid" "$PLIANT_EXE"; then
                    echo "pliant node (pid $pid) still running after its supervisor exited; killed" >>"$ANOMALIES"
                    kill -KILL "$pid" 2>/dev/null || true
                fi
            done
        fi
        if ((IN_CLEANUP)); then # exiting anyway: no status checks (bash may have dropped its jobs)
            [[ -n $CLUSTER_DIR ]] && rm -rf "$CLUSTER_DIR"
            return 0
        fi
        if [[ -n $sup ]]; then
            wait "$sup" 2>/dev/null || rc=$?
            if ((rc != 0)); then
                echo "pliant cluster up exited with status $rc after SIGTERM; its stderr: $(tr '\n' '|' <"$CLUSTER_LOG")" >>"$ANOMALIES"
            elif ! grep -q '^pliant cluster: stopped$' "$CLUSTER_LOG"; then
                echo "pliant cluster up exited 0 without 'pliant cluster: stopped'" >>"$ANOMALIES"
            fi
            if grep -v -e '^pliant cluster: stopped$' "$CLUSTER_LOG" >"$WORK/extra.txt" 2>/dev/null \
                && [[ -s $WORK/extra.txt ]]; then
                echo "pliant cluster up stderr: $(head -c 2000 "$WORK/extra.txt" | tr '\n' '|')" >>"$ANOMALIES"
            fi
        fi
        # Each node's log: its first line and the clean-stop line, nothing else.
        for log in "$CLUSTER_DIR"/node-*.log; do
            [[ -e $log ]] || continue
            if grep -v -e '^pliant serve: listening on' -e '^pliant serve: stopped cleanly$' "$log" >"$WORK/extra.txt" 2>/dev/null \
                && [[ -s $WORK/extra.txt ]]; then
                echo "pliant $(basename "$log"): $(head -c 2000 "$WORK/extra.txt" | tr '\n' '|')" >>"$ANOMALIES"
            fi
            grep -q '^pliant serve: stopped cleanly$' "$log" \
                || echo "pliant $(basename "$log") has no 'stopped cleanly' line" >>"$ANOMALIES"
        done
    else
        for pid in "${nodes[@]}"; do
            kill -TERM "$pid" 2>/dev/null || true
        done
        if ((${#nodes[@]})) && ! wait_gone 600 "${nodes[@]}"; then
            for pid in "${nodes[@]}"; do
                if alive "$pid"; then
                    echo "redis-server (pid $pid) still running 60 s after SIGTERM; killed" >>"$ANOMALIES"
                    kill -KILL "$pid" 2>/dev/null || true
                fi
            done
        fi
        if ((IN_CLEANUP)); then
            [[ -n $CLUSTER_DIR ]] && rm -rf "$CLUSTER_DIR"
            return 0
        fi
        for pid in "${nodes[@]}"; do
            rc=0
            wait "$pid" 2>/dev/null || rc=$?
            ((rc == 0)) || echo "redis-server (pid $pid) exited with status $rc after SIGTERM" >>"$ANOMALIES"
        done
    fi
    [[ -n $CLUSTER_DIR ]] && rm -rf "$CLUSTER_DIR"
    CLUSTER_DIR=""
}

IN_CLEANUP=0
cleanup() {
    local rc=$?
    trap - EXIT
    IN_CLEANUP=1
    stop_cluster || true
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


# Wait (at most 30 s) until every node answers PING and its `cluster info` shows cluster_state:ok,
# all 16,384 slots ok and NODES known nodes.
wait_cluster_ok() {
    local i port ready info pid
    for ((i = 0; i < 300; i++)); do
        for pid in "${NODE_PIDS[@]}" ${SUP_PID:+"$SUP_PID"}; do
            alive "$pid" || die "$CLUSTER_KIND cluster: pid $pid exited during startup ($(cluster_log_tail))"
        done
        ready=0
        for port in "${NODE_PORTS[@]}"; do
            info=$(timeout 2 redis-cli -h "$HOST" -p "$port" cluster info 2>/dev/null | tr -d '\r') || break
            grep -qx 'cluster_state:ok' <<<"$info" || break
            grep -qx 'cluster_slots_ok:16384' <<<"$info" || break
            grep -qx "cluster_known_nodes:$NODES" <<<"$info" || break
            ready=$((ready + 1))
        done
        ((ready == NODES)) && return 0
        sleep 0.1
    done
    die "$CLUSTER_KIND cluster not ok within 30 s: $(timeout 2 redis-cli -h "$HOST" -p "${NODE_PORTS[0]}" cluster info 2>&1 | tr -d '\r' | tr '\n' ' ') ($(cluster_log_tail))"
}

cluster_log_tail() {
    local f
    for f in "$CLUSTER_LOG" "$CLUSTER_DIR"/*.log "$CLUSTER_DIR"/create.out; do
        [[ -f $f ]] && printf '%s: %s; ' "$(basename "$f")" "$(tail -n 5 "$f" | tr '\n' '|')"
    done
    return 0
}

SEQ=0
# start_pliant: a fresh `pliant cluster up` in its own dir; every port is picked by the processes
# that listen on it (--base-port 0), read back from the JSON line it prints once the cluster
# serves.
start_pliant() {
    local i line parsed
    SEQ=$((SEQ + 1))
    CLUSTER_KIND=pliant
    CLUSTER_DIR="$WORK/pliant-$SEQ"
    CLUSTER_LOG="$WORK/pliant-$SEQ.err"
    local out="$WORK/pliant-$SEQ.out"
    NODE_PIDS=()
    NODE_PORTS=()
    : >"$out"
    : >"$CLUSTER_LOG"
    "${SRV_PIN[@]}" "$PLIANT" cluster up --nodes "$NODES" --base-port 0 --json --dir "$CLUSTER_DIR" \
        -- --no-store >"$out" 2>"$CLUSTER_LOG" </dev/null &
    SUP_PID=$!
    line=""
    for ((i = 0; i < 600; i++)); do # 60 s
        if [[ $(wc -l <"$out") -ge 1 ]]; then
            line=$(head -n 1 "$out")
            break
        fi
        alive "$SUP_PID" || die "pliant cluster up exited during startup: $(cat "$CLUSTER_LOG") ($(cluster_log_tail))"
        sleep 0.1
    done
    [[ -n $line ]] || die "pliant cluster up printed no JSON line within 60 s ($(cluster_log_tail))"
    parsed=$(python3 - "$line" "$NODES" <<'EOF'
import json, sys
up, n = json.loads(sys.argv[1]), int(sys.argv[2])
nodes = up["nodes"]
assert len(nodes) == n and len(up["pids"]) == n, f"expected {n} nodes: {up}"
slots = sorted(r for node in nodes for r in node["slots"])
nxt = 0
for a, b in slots:
    assert a == nxt, f"slots not contiguous at {a}: {slots}"
    nxt = b + 1
assert nxt == 16384, f"slots end at {nxt - 1}: {slots}"
ports = []
for node in nodes:
    host, port = node["addr"].rsplit(":", 1)
    assert host == "127.0.0.1", node["addr"]
    ports.append(port)
print(" ".join(ports))
print(" ".join(str(p) for p in up["pids"]))
EOF
    ) || die "pliant cluster up's line is not what was expected: $line"
    read -r -a NODE_PORTS <<<"$(sed -n 1p <<<"$parsed")"
    read -r -a NODE_PIDS <<<"$(sed -n 2p <<<"$parsed")"
    wait_cluster_ok
}

# start_redis: 3 fresh redis-servers with cluster mode on, in their own dir, joined into a cluster
# of masters only.
start_redis() {
    local port pid
    SEQ=$((SEQ + 1))
    CLUSTER_KIND=redis
    CLUSTER_DIR="$WORK/redis-$SEQ"
    CLUSTER_LOG=""
    SUP_PID=""
    NODE_PIDS=()
    NODE_PORTS=()
    mkdir -p "$CLUSTER_DIR"
    read -r -a NODE_PORTS <<<"$(free_cluster_ports "$NODES")" || die "no free ports"
    ((${#NODE_PORTS[@]} == NODES)) || die "no free ports"
    for port in "${NODE_PORTS[@]}"; do
        "${SRV_PIN[@]}" redis-server --bind "$HOST" --port "$port" --dir "$CLUSTER_DIR" \
            --logfile "$CLUSTER_DIR/redis-$port.log" --daemonize no --save '' --appendonly no \
            --cluster-enabled yes --cluster-config-file "$CLUSTER_DIR/nodes-$port.conf" \
            >/dev/null 2>&1 &
        NODE_PIDS+=($!)
    done
    # Every node answers PING (at most 10 s) before they are joined.
    local i ready
    for ((i = 0; i < 200; i++)); do
        ready=0
        for pid in "${NODE_PIDS[@]}"; do
            alive "$pid" || die "redis-server (pid $pid) exited during startup ($(cluster_log_tail))"
        done
        for port in "${NODE_PORTS[@]}"; do
            [[ $(timeout 2 redis-cli -h "$HOST" -p "$port" ping 2>/dev/null) == PONG ]] || break
            ready=$((ready + 1))
        done
        ((ready == NODES)) && break
        sleep 0.05
    done
    ((ready == NODES)) || die "redis-server did not answer PING within 10 s ($(cluster_log_tail))"
    local addrs=()
    for port in "${NODE_PORTS[@]}"; do addrs+=("$HOST:$port"); done
    timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
        >"$CLUSTER_DIR/create.out" 2>&1 </dev/null \
        || die "redis-cli --cluster create failed or took over 60 s: $(tail -n 20 "$CLUSTER_DIR/create.out")"
    wait_cluster_ok
}

start_cluster() { # pliant|redis
    local want pid t0 t1
    t0=$(date +%s.%N)
    if [[ $1 == pliant ]]; then
        start_pliant
        want=$PLIANT_EXE
    else
        start_redis
        want=$(readlink -f "$(command -v redis-server)")
    fi
    t1=$(date +%s.%N)
    START_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    # The pids we will signal or watch must be the servers themselves, not wrappers around them.
    for pid in ${SUP_PID:+"$SUP_PID"} "${NODE_PIDS[@]}"; do
        runs_exe "$pid" "$want" || die "pid $pid is not a $1 process"
    done
}

# bench P REQUESTS: sets SET_RPS, GET_RPS and KEYS_PER_NODE (runs in this shell, so a failure
# stops the script).
bench() {
    local p=$1 n=$2 out="$WORK/bench.csv" err="$WORK/bench.err" rc=0 pid port k
    timeout --foreground "$BENCH_TIMEOUT" "${CLI_PIN[@]}" redis-benchmark --cluster -h "$HOST" \
        -p "${NODE_PORTS[0]}" -c "$CLIENTS" -d "$VALUE_SIZE" -t set,get -n "$n" -P "$p" \
        -r "$KEYSPACE" --csv >"$out" 2>"$err" || rc=$?
    ((rc == 0)) || die "redis-benchmark --cluster against $CLUSTER_KIND failed (status $rc): $(cat "$err" "$out" | tail -n 20)"
    if [[ -s $err ]]; then
        echo "redis-benchmark against $CLUSTER_KIND (-P $p) stderr: $(head -c 1000 "$err" | tr '\n' '|')" >>"$ANOMALIES"
    fi
    for pid in ${SUP_PID:+"$SUP_PID"} "${NODE_PIDS[@]}"; do
        alive "$pid" || die "$CLUSTER_KIND: pid $pid died during redis-benchmark ($(cluster_log_tail))"
    done
    # It must have seen our 3 masters, and printed nothing but them and the CSV (a map refetch
    # after a MOVED/ASK prints a WARNING line).
    local masters want
    masters=$(sed -n 's/^Master [0-9]*: [0-9a-f]* \(.*\)$/\1/p' "$out" | sort | tr '\n' ' ')
    want=$(for port in "${NODE_PORTS[@]}"; do echo "$HOST:$port"; done | sort | tr '\n' ' ')
    if ! grep -qx "Cluster has $NODES master nodes:" "$out" || [[ $masters != "$want" ]]; then
        echo "redis-benchmark against $CLUSTER_KIND (-P $p) saw masters '$masters', not '$want'" >>"$ANOMALIES"
    fi
    if grep -v -E -e '^Cluster has [0-9]+ master nodes:$' -e '^$' -e '^Master [0-9]+: ' -e '^"' "$out" \
        >"$WORK/extra.txt" && [[ -s $WORK/extra.txt ]]; then
        echo "redis-benchmark against $CLUSTER_KIND (-P $p) printed: $(sort "$WORK/extra.txt" | uniq -c | head -c 1000 | tr '\n' '|')" >>"$ANOMALIES"
    fi
    SET_RPS=$(awk -F'"' '$2 == "SET" { print $4 }' "$out")
    GET_RPS=$(awk -F'"' '$2 == "GET" { print $4 }' "$out")
    [[ $SET_RPS =~ ^[0-9.]+$ && $GET_RPS =~ ^[0-9.]+$ ]] \
        || die "no SET/GET figures from redis-benchmark against $CLUSTER_KIND: $(cat "$out" "$err")"
    # Every node must have taken writes (its share of the clients wrote keys of its slots).
    KEYS_PER_NODE=""
    for port in "${NODE_PORTS[@]}"; do
        k=$(timeout 10 redis-cli -h "$HOST" -p "$port" dbsize 2>&1 || true)
        [[ $k =~ ^[0-9]+$ && $k -gt 0 ]] \
            || echo "$CLUSTER_KIND node $HOST:$port after redis-benchmark (-P $p): DBSIZE '$k'" >>"$ANOMALIES"
        KEYS_PER_NODE+="${KEYS_PER_NODE:+,}$k"
    done
}

# ---------------------------------------------------------------------------------------------
if [[ -n ${PLIANT_BIN:-} ]]; then
    [[ -x $PLIANT_BIN ]] || die "PLIANT_BIN=$PLIANT_BIN is not an executable"
    SRC_BIN=$PLIANT_BIN
    log "vs_redis_cluster: measuring $SRC_BIN (PLIANT_BIN; not building)"
else
    log "vs_redis_cluster: building the release binary"
    (cd "$ROOT" && cargo build --release --locked -q) || die "cargo build --release --locked failed"
    SRC_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/pliant
fi
# A private copy: another build in the same target dir may relink target/release/pliant while
# this runs, and every cell must measure the same binary (`cluster up` starts its nodes from its
# own executable, so they run this copy too).
PLIANT="$WORK/pliant"
cp "$SRC_BIN" "$PLIANT"
PLIANT_EXE=$(readlink -f "$PLIANT")
PLIANT_VERSION=$("$PLIANT" --version)
REDIS_VERSION=$(redis-server --version | awk '{ sub(/^v=/, "", $3); print $3 }')
GIT_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null | head -n 1) ]]; then GIT_REV="$GIT_REV+dirty"; fi
# A binary given from outside was not built from this tree: its name, not the tree's commit.
if [[ -n ${PLIANT_BIN:-} ]]; then GIT_REV="PLIANT_BIN=$PLIANT_BIN"; fi
log "vs_redis_cluster: $PLIANT_VERSION ($GIT_REV) vs Redis Cluster $REDIS_VERSION, $NODES nodes each; ROUNDS=$ROUNDS N=$N N16=$N16 KEYSPACE=$KEYSPACE PIN=$PIN"

START=$(date +%s)
RESULTS="$WORK/results.tsv" # P op system round ops/s
RUNS="$WORK/runs.tsv"       # P system round start_seconds keys_per_node
: >"$RESULTS"
: >"$RUNS"

# Within one run, SET goes first and fills the keyspace, so GET reads keys that exist.
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order=(pliant redis); else order=(redis pliant); fi
    for p in 1 16; do
        if ((p == 1)); then n=$N; else n=$N16; fi
        for srv in "${order[@]}"; do
            start_cluster "$srv"
            bench "$p" "$n"
            stop_cluster
            printf '%s\tSET\t%s\t%s\t%s\n%s\tGET\t%s\t%s\t%s\n' \
                "$p" "$srv" "$r" "$SET_RPS" "$p" "$srv" "$r" "$GET_RPS" >>"$RESULTS"
            printf '%s\t%s\t%s\t%s\t%s\n' "$p" "$srv" "$r" "$START_S" "$KEYS_PER_NODE" >>"$RUNS"
            log "  round $r/$ROUNDS  -P $p  $srv: SET $SET_RPS  GET $GET_RPS ops/s  (cluster up in $START_S s; keys per node $KEYS_PER_NODE)"
        done
    done
done
WALL=$(($(date +%s) - START))

# ---------------------------------------------------------------------------------------------
python3 - "$RESULTS" "$RUNS" "$ANOMALIES" "$JSON_OUT" "$ROUNDS" "$N" "$N16" "$KEYSPACE" \
    "$PLIANT_VERSION ($GIT_REV)" "$REDIS_VERSION" "$WALL" "$PIN" "$NODES" <<'EOF'
import json, statistics, sys

(results, runs_file, anomalies, json_out, rounds, n, n16, keyspace,
 pliant_version, redis_version, wall, pin, nodes) = sys.argv[1:]
rounds, n, n16, keyspace, wall, nodes = map(int, (rounds, n, n16, keyspace, wall, nodes))

runs = {}
for line in open(results):
    p, op, srv, r, ops = line.rstrip("\n").split("\t")
    runs.setdefault((int(p), op), {}).setdefault(srv, []).append(float(ops))

starts = []
for line in open(runs_file):
    p, srv, r, start_s, keys = line.rstrip("\n").split("\t")
    starts.append({"pipeline": int(p), "system": srv, "round": int(r),
                   "start_seconds": float(start_s), "keys_per_node": keys.split(",")})

print(f"pliant cluster up ({pliant_version}, {nodes} nodes, --no-store) vs Redis Cluster "
      f"{redis_version} ({nodes} masters, no persistence): median ops/s of {rounds} round(s); "
      f"redis-benchmark --cluster -c 50 -d 100 -r {keyspace} -t set,get, "
      f"-n {n} at -P 1, -n {n16} at -P 16{', nodes and client pinned to one CPU each' if pin == '1' else ''}")
print()
print("| cell | pliant ops/s | redis ops/s | pliant/redis |")
print("|---|---:|---:|---:|")
cells = []
for p in (1, 16):
    for op in ("SET", "GET"):
        d = runs[(p, op)]
        pm, rm = statistics.median(d["pliant"]), statistics.median(d["redis"])
        cells.append({"pipeline": p, "op": op, "pliant_median": pm, "redis_median": rm,
                      "ratio": pm / rm, "pliant_runs": d["pliant"], "redis_runs": d["redis"]})
        print(f"| {nodes} nodes, no store, {op}, -P {p} | {pm:,.0f} | {rm:,.0f} | {pm / rm:.2f} |")

# redis-benchmark --cluster's elapsed time is a multiple of its 250 ms timer (plus a few ms).
elapsed = [(c["pipeline"], c["op"], (n if c["pipeline"] == 1 else n16) / x)
           for c in cells for x in c["pliant_runs"] + c["redis_runs"]]
p, op, shortest = min(elapsed, key=lambda e: e[2])
print()
print(f"resolution: redis-benchmark --cluster times a run in 250 ms ticks; the shortest run ({op} -P {p}) "
      f"lasted {shortest:.2f} s, so one tick is {25 / shortest:.0f}% of its figure"
      + (" (too coarse for these ratios: raise N/N16)" if shortest < 2.5 else ""))

notes = [l.rstrip("\n") for l in open(anomalies) if l.strip()]
if notes:
    print()
    print("anomalies:")
    for l in notes:
        print(f"- {l}")

print(f"\nper-round ops/s (wall time of the measurements, cluster starts included: {wall} s):",
      file=sys.stderr)
for c in cells:
    print(f"  {c['op']} -P {c['pipeline']:<2}  pliant "
          + " ".join(f"{x:,.0f}" for x in c["pliant_runs"]) + "   redis "
          + " ".join(f"{x:,.0f}" for x in c["redis_runs"]), file=sys.stderr)
for srv in ("pliant", "redis"):
    s = [x for x in starts if x["system"] == srv]
    print(f"  {srv:6} cluster start: " + " ".join(f"{x['start_seconds']:.2f}" for x in s)
          + " s; keys per node after each run: "
          + " ".join("/".join(x["keys_per_node"]) for x in s), file=sys.stderr)

if json_out:
    with open(json_out, "w") as f:
        json.dump({"pliant": pliant_version, "redis": redis_version, "nodes": nodes,
                   "rounds": rounds, "requests_p1": n, "requests_p16": n16,
                   "keyspace": keyspace, "clients": 50, "value_size": 100,
                   "pinned": pin == "1", "cells": cells, "runs": starts,
                   "anomalies": notes, "wall_seconds": wall}, f, indent=2)
        f.write("\n")
EOF
