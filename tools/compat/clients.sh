#!/usr/bin/env bash
# Real Redis clients against a real `pliant serve`: redis-cli (commands, RESP3, --pipe, --scan),
# redis-benchmark (every command it tests that the node implements) and redis-py (RESP2 and
# RESP3, pipelines, scan_iter, expiry, AUTH). Fails on the first answer a client does not accept.
# .ci/run runs it; so can anyone:
#
#   tools/compat/clients.sh
#
# Installs what is missing (as root: redis-tools with apt-get; redis-py into a virtual
# environment under target/), or names it and stops. Loopback only; the node is stopped by its pid.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tools/lib/clients.sh
need_redis_py
venv=target/compat-venv

cargo build --release --locked -q
tmp=$(mktemp -d)
source tools/lib/node.sh
cleanup() { stop_node; rm -rf "$tmp"; }
trap cleanup EXIT
start() { start_node target/release/pliant "$tmp/serve.log" "$@"; port=$node_port; }
stop() { stop_node; }
expect() { # expect WANT CMD…
  local want=$1; shift
  local got
  got=$(timeout 10 "$@")
  [ "$got" = "$want" ] || { echo "clients.sh: $* gave '$got', expected '$want'" >&2; exit 1; }
}

start --store "$tmp/store"
cli=(redis-cli -p "$port")
expect PONG "${cli[@]}" ping
expect OK "${cli[@]}" set greeting hello
expect hello "${cli[@]}" get greeting
expect 11 "${cli[@]}" incrby n 11
expect 1 "${cli[@]}" expire n 100
expect 100 "${cli[@]}" ttl n
expect "(nil)" redis-cli -p "$port" --no-raw get missing
timeout 10 "${cli[@]}" -3 hello 3 | grep -qx "proto 3"
expect hello "${cli[@]}" -3 get greeting
printf 'SET p%d %d\r\n' $(seq 1 1000 | awk '{print $1, $1}') > "$tmp/pipe.txt"
timeout 30 "${cli[@]}" --pipe < "$tmp/pipe.txt" | grep -q "errors: 0, replies: 1000"
expect 1000 sh -c "redis-cli -p $port --scan --pattern 'p*' | wc -l"
expect 1002 "${cli[@]}" dbsize
echo "redis-cli: ok" >&2

timeout 120 redis-benchmark -p "$port" -q -n 20000 -c 20 -t ping,set,get,incr,mset -d 64 --csv > "$tmp/bench.csv"
rows=$(grep -c '^"' "$tmp/bench.csv")
[ "$rows" -ge 6 ] || { echo "clients.sh: redis-benchmark ran $rows tests: $(cat "$tmp/bench.csv")" >&2; exit 1; }
echo "redis-benchmark: ok ($(grep -c . "$tmp/bench.csv") lines)" >&2
stop

start --no-store --requirepass s3cret
timeout 60 "$venv/bin/python" - "$port" <<'PY'
import sys, redis
port = int(sys.argv[1])
try:
    redis.Redis(port=port).get("k")
    raise SystemExit("redis-py: no password accepted")
except redis.AuthenticationError:
    pass
for proto in (2, 3):
    r = redis.Redis(port=port, password="s3cret", protocol=proto, decode_responses=True)
    assert r.ping()
    assert r.set(f"a{proto}", "1") and r.get(f"a{proto}") == "1"
    assert r.set(f"a{proto}", "2", nx=True) is None
    assert r.incrby(f"n{proto}", 5) == 5
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set(f"k{proto}:{i}", i)
    assert all(p.execute())
    assert r.mget([f"k{proto}:1", f"k{proto}:99", "none"]) == ["1", "99", None]
    assert len(list(r.scan_iter(match=f"k{proto}:*", count=7))) == 100
    assert r.expire(f"a{proto}", 50) and 49 <= r.ttl(f"a{proto}") <= 50
    assert r.delete(f"a{proto}", "none") == 1
    assert r.exists(f"k{proto}:5") == 1
    info = r.info("stats")
    assert "keyspace_hits" in info
print("redis-py: ok", file=sys.stderr)
PY
stop
echo "clients.sh: every client accepted every answer" >&2
