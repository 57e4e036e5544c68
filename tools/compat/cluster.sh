#!/usr/bin/env bash
# Real Redis Cluster clients against a real `pliant cluster up` (3 nodes on loopback): redis-cli
# (-c through MOVED to every node, CLUSTER INFO, --cluster check), redis-py's RedisCluster (1,000
# keys, mset/mget_nonatomic, a pipeline, keyslot, DBSIZE on every node) and redis-benchmark
# --cluster (SET, GET). Fails on the first answer a client does not accept.
# .ci/run runs it; so can anyone:
#
#   tools/compat/cluster.sh
#
# Installs what is missing (as root: redis-tools with apt-get; redis-py into a virtual
# environment under target/), or names it and stops. Loopback only; the cluster is stopped by the
# pid of `pliant cluster up` (which stops its nodes), and no node is left running.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tools/lib/clients.sh
need_redis_py
venv=target/compat-venv

cargo build --release --locked -q
tmp=$(mktemp -d)
up_pid=
node_pids=()

fail() { echo "cluster.sh: $*" >&2; exit 1; }

alive() { # alive PID: the process runs (and is not a zombie waiting to be reaped)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# SIGTERM to `pliant cluster up` by its pid; waits (at most 30 s: it gives its nodes 15 s) for it,
# then checks that none of its nodes still runs. Fails if anything had to be killed.
stop_cluster() {
  [ -n "$up_pid" ] || return 0
  local pid=$up_pid ok=0 status=0 n
  up_pid=
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    echo "cluster.sh: pliant cluster up ($pid) did not stop within 30 s; killing it" >&2
    kill -9 "$pid" 2>/dev/null || true
    ok=1
  fi
  wait "$pid" 2>/dev/null || status=$?
  if [ "$ok" = 0 ] && [ "$status" != 0 ]; then
    echo "cluster.sh: pliant cluster up exited with $status: $(tail -n 5 "$tmp/up.log")" >&2
    ok=1
  fi
  for n in "${node_pids[@]}"; do
    # Only a `pliant serve` (the pid may have been reused since).
    if alive "$n" && tr '\0' ' ' < "/proc/$n/cmdline" 2>/dev/null | grep -q 'serve .*--coord'; then
      echo "cluster.sh: node $n still runs after pliant cluster up stopped; killing it" >&2
      kill -9 "$n" 2>/dev/null || true
      ok=1
    fi
  done
  node_pids=()
  return "$ok"
}
cleanup() {
  local ok=0
  stop_cluster || ok=1
  rm -rf "$tmp"
  [ "$ok" = 0 ] || exit 1
}
trap cleanup EXIT

target/release/pliant cluster up --nodes 3 --base-port 0 --json --dir "$tmp/cluster" \
  >"$tmp/up.json" 2>"$tmp/up.log" </dev/null &
up_pid=$!
# Its first line, once every node serves the map (at most 60 s).
for _ in $(seq 1 600); do
  [ "$(wc -l < "$tmp/up.json")" -ge 1 ] && break
  alive "$up_pid" || break
  sleep 0.1
done
[ "$(wc -l < "$tmp/up.json")" -ge 1 ] \
  || fail "pliant cluster up did not come up within 60 s: $(tail -n 20 "$tmp/up.log")"
# Its node pids and node ports, and a check of its line: 3 nodes, every slot once.
parsed=$("$py" - "$tmp/up.json" <<'PY'
import json, sys
up = json.loads(open(sys.argv[1]).readline())
nodes = up["nodes"]
assert len(nodes) == 3 and len(up["pids"]) == 3, up
slots = sorted(s for n in nodes for a, b in n["slots"] for s in range(a, b + 1))
assert slots == list(range(16384)), "the slots are not all assigned once"
assert all(n["slots"] and n["addr"].startswith("127.0.0.1:") for n in nodes), nodes
print(" ".join(str(p) for p in up["pids"]))
print(" ".join(n["addr"].rsplit(":", 1)[1] for n in nodes))
PY
) || fail "pliant cluster up printed $(head -n 1 "$tmp/up.json")"
{ read -ra node_pids; read -ra ports; } <<<"$parsed"
port=${ports[0]}

expect() { # expect CLIENT WANT CMD…
  local client=$1 want=$2; shift 2
  local got
  got=$(timeout 10 "$@" 2>&1) || true
  [ "$got" = "$want" ] || fail "$client: $* gave '$got', expected '$want'"
}

# redis-cli: 20 keys through one node, followed wherever MOVED sends them.
cli=(redis-cli -c -p "$port")
for i in $(seq 1 20); do
  expect redis-cli OK "${cli[@]}" set "key:$i" "value $i"
done
for i in $(seq 1 20); do
  expect redis-cli "value $i" "${cli[@]}" get "key:$i"
done
total=0
for p in "${ports[@]}"; do
  n=$(timeout 10 redis-cli -p "$p" dbsize 2>&1) || true
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" = 0 ]; then
    fail "redis-cli: dbsize on port $p gave '$n' (the keys did not spread over every node)"
  fi
  total=$((total + n))
  info=$(timeout 10 redis-cli -p "$p" cluster info 2>&1 | tr -d '\r') || true
  grep -qx 'cluster_state:ok' <<<"$info" || fail "redis-cli: cluster info on port $p gave '$info'"
done
[ "$total" = 20 ] || fail "redis-cli: the nodes hold $total keys, expected 20"
cli_keys=$total
# --cluster check reads CLUSTER NODES, INFO and DBSIZE of every node.
check=$(timeout 30 redis-cli --cluster check "127.0.0.1:$port" 2>&1) \
  || fail "redis-cli: --cluster check failed: $check"
for want in "[OK] 20 keys in 3 masters." "[OK] All nodes agree about slots configuration." \
  "[OK] All 16384 slots covered."; do
  grep -qF "$want" <<<"$check" || fail "redis-cli: --cluster check did not say '$want': $check"
done
! grep -qE '\[(ERR|WARNING)\]' <<<"$check" || fail "redis-cli: --cluster check: $check"
echo "redis-cli: ok" >&2

# redis-py: RedisCluster, with a plain Redis per node for DBSIZE.
timeout 60 "$py" - "$cli_keys" "${ports[@]}" <<'PY'
import sys
import redis
from redis.cluster import RedisCluster

cli_keys, ports = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
def check(what, got, want):
    if got != want:
        raise SystemExit(f"redis-py: {what} gave {got!r}, expected {want!r}")

rc = RedisCluster(host="127.0.0.1", port=ports[0], decode_responses=True)
check("the nodes it found", sorted(n.port for n in rc.get_nodes()), sorted(ports))
for i in range(1000):
    check(f"set py:{i}", rc.set(f"py:{i}", i), True)
for i in range(1000):
    check(f"get py:{i}", rc.get(f"py:{i}"), str(i))
res = rc.mset_nonatomic({f"py:{i}": f"m{i}" for i in range(100)})  # one reply per slot
check("mset_nonatomic", bool(res) and all(r is True for r in res), True)
check("mget_nonatomic", rc.mget_nonatomic([f"py:{i}" for i in range(100)] + ["none"]),
      [f"m{i}" for i in range(100)] + [None])
p = rc.pipeline()
for i in range(100, 200):
    p.set(f"py:{i}", f"p{i}")
for i in range(100, 200):
    p.get(f"py:{i}")
check("pipeline", p.execute(), [True] * 100 + [f"p{i}" for i in range(100, 200)])
check("keyslot foo", rc.keyslot("foo"), 12182)
check("keyslot {user1000}.following", rc.keyslot("{user1000}.following"), rc.keyslot("{user1000}.followers"))
for k in ("foo", "key:1", "py:7", "{user1000}.following"):
    check(f"cluster keyslot {k}", rc.cluster_keyslot(k), rc.keyslot(k))
check("mget_nonatomic of every key", rc.mget_nonatomic([f"py:{i}" for i in range(1000)]),
      [f"m{i}" for i in range(100)] + [f"p{i}" for i in range(100, 200)] + [str(i) for i in range(200, 1000)])
sizes = {p: redis.Redis(host="127.0.0.1", port=p).dbsize() for p in ports}
if not all(sizes.values()):
    raise SystemExit(f"redis-py: a node holds no keys: {sizes}")
check(f"the sum of DBSIZE {sizes}", sum(sizes.values()), 1000 + cli_keys)
rc.close()
print("redis-py: ok", file=sys.stderr)
PY

# redis-benchmark --cluster: SET and GET through every node.
timeout 120 redis-benchmark --cluster -h 127.0.0.1 -p "$port" -t set,get -n 20000 -c 20 -q --csv \
  >"$tmp/bench.csv" 2>&1 || fail "redis-benchmark: failed: $(cat "$tmp/bench.csv")"
! grep -qi 'error' "$tmp/bench.csv" || fail "redis-benchmark: $(cat "$tmp/bench.csv")"
rates=()
for t in SET GET; do
  rps=$(sed -n "s/^\"$t\",\"\([0-9.]*\)\".*/\1/p" "$tmp/bench.csv")
  awk -v r="$rps" 'BEGIN { exit !(r > 0) }' \
    || fail "redis-benchmark: no positive rps for $t: $(cat "$tmp/bench.csv")"
  rates+=("$t $rps/s")
done
echo "redis-benchmark: ok (${rates[0]}, ${rates[1]})" >&2

stop_cluster || fail "the cluster did not stop cleanly"
echo "cluster.sh: every cluster client accepted every answer" >&2
