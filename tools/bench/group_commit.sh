#!/usr/bin/env bash
# Group commit: `pliant serve --durability always` against Redis with `appendonly yes,
# appendfsync always`, both fsyncing every acknowledged write.
#
# What it measures
#   redis-benchmark, CLIENTS (50) clients, SETs of VALUE_SIZE-byte values over KEYSPACE random
#   keys, N requests, one request per round trip (-P 1), against each server in turn, ROUNDS
#   times, the order flipped every round so drift on a shared machine hits both alike. For
#   pliant, ops per fsync: the SETs acknowledged divided by the store's fsyncs (INFO's
#   store_syncs) during the run. Without group commit every client's write waited for an fsync
#   of its own, under the keyspace lock, so this was 1 and every client stalled every other.
#
# How to read it
#   stdout: one markdown row per round and a median row: ops/s of each server, pliant/redis
#   (above 1: pliant is faster), pliant's fsyncs and ops per fsync, and each server's CPU a SET
#   (user + system of all its threads, /proc, µs): where the ratio sits near 1, whether one
#   server spends more to get there (redis-benchmark's own CPU is the same for both). Redis also
#   shares its fsync
#   (its event loop writes every client's command of one loop turn, then fsyncs once), so the
#   ratio is group commit against group commit.
#
# Usage
#   tools/bench/group_commit.sh [--quick]
#   env: ROUNDS (3), N (100000), CLIENTS (50), VALUE_SIZE (100), KEYSPACE (100000),
#        PLIANT_BIN (a pliant binary instead of building target/release/pliant)
#   --quick: ROUNDS=1, N=10000.
#
# Needs redis-server, redis-cli, redis-benchmark, python3, cargo. Loopback only, ports chosen at
# run time; every process started is stopped by its pid; the temp dir is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3} N=${N:-100000} CLIENTS=${CLIENTS:-50} VALUE_SIZE=${VALUE_SIZE:-100}
KEYSPACE=${KEYSPACE:-100000}
if [[ ${1:-} == --quick ]]; then ROUNDS=1 N=10000; fi
for tool in redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "group_commit.sh: needs $tool (apt-get install redis-server redis-tools python3)" >&2; exit 1; }
done
if [[ -n ${PLIANT_BIN:-} ]]; then
  BIN=$PLIANT_BIN
else
  cargo build --release --locked -q
  BIN=target/release/pliant
fi

tmp=$(mktemp -d)
source tools/lib/node.sh
redis_pid=
cleanup() {
  stop_node
  if [[ -n $redis_pid ]]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Waits (at most 10 s) for PONG on port $1.
ready() {
  for _ in $(seq 1 200); do
    [[ $(timeout 2 redis-cli -p "$1" ping 2>/dev/null) == PONG ]] && return 0
    sleep 0.05
  done
  echo "group_commit.sh: nothing answers on port $1" >&2
  exit 1
}

# SET ops/s of redis-benchmark against port $1.
bench() {
  timeout 600 redis-benchmark -p "$1" -c "$CLIENTS" -d "$VALUE_SIZE" -t set -n "$N" -r "$KEYSPACE" --csv \
    | awk -F'"' '/^"SET"/ { print $4 }'
}

syncs() { redis-cli -p "$1" info pliant | tr -d '\r' | sed -n 's/^store_syncs://p'; }

# CPU seconds (user + system, every thread) process $1 has used; after the `)` that ends the
# command name, utime and stime are the 12th and 13th fields.
cpu_s() { sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'; }

run_pliant() {
  local dir="$tmp/pliant-$1"
  start_node "$BIN" "$tmp/pliant-$1.log" --store "$dir" --durability always
  ready "$node_port"
  local before after ops cpu0 cpu1
  before=$(syncs "$node_port")
  cpu0=$(cpu_s "$node_pid")
  ops=$(bench "$node_port")
  cpu1=$(cpu_s "$node_pid")
  after=$(syncs "$node_port")
  stop_node
  echo "$ops $((after - before)) $cpu0 $cpu1"
}

run_redis() {
  local dir="$tmp/redis-$1" port
  mkdir -p "$dir"
  port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly yes \
    --appendfsync always --daemonize no --logfile "$dir/redis.log" >/dev/null 2>&1 &
  redis_pid=$!
  ready "$port"
  local ops cpu0 cpu1
  cpu0=$(cpu_s "$redis_pid")
  ops=$(bench "$port")
  cpu1=$(cpu_s "$redis_pid")
  echo "$ops $cpu0 $cpu1"
  kill "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
}

echo "group commit, $(date -u +%F), $(nproc) cores, $(uname -r), $CLIENTS clients, $N SETs of $VALUE_SIZE B, redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
echo
echo "| round | pliant always (ops/s) | redis appendfsync always (ops/s) | pliant/redis | pliant fsyncs | ops per fsync | pliant CPU a SET (µs) | redis CPU a SET (µs) |"
echo "|---|---|---|---|---|---|---|---|"
results=()
for r in $(seq 1 "$ROUNDS"); do
  if ((r % 2)); then
    read -r p s pc0 pc1 < <(run_pliant "$r")
    read -r q rc0 rc1 < <(run_redis "$r")
  else
    read -r q rc0 rc1 < <(run_redis "$r")
    read -r p s pc0 pc1 < <(run_pliant "$r")
  fi
  # Each server's CPU a SET in µs, then the row.
  read -r pc rc row < <(python3 -c "
import sys
p, q, s, n, pc0, pc1, rc0, rc1 = map(float, sys.argv[1:])
pc, rc = (pc1 - pc0) / n * 1e6, (rc1 - rc0) / n * 1e6
print(pc, rc, f'{p:.0f} | {q:.0f} | {p/q:.2f} | {s:.0f} | {n/max(s,1):.1f} | {pc:.1f} | {rc:.1f}')
" "$p" "$q" "$s" "$N" "$pc0" "$pc1" "$rc0" "$rc1")
  echo "| $r | $row |"
  results+=("$p $q $s $pc $rc")
done
python3 - "$N" "${results[@]}" <<'EOF'
import statistics, sys
n = float(sys.argv[1])
rows = [list(map(float, r.split())) for r in sys.argv[2:]]
p = statistics.median(r[0] for r in rows)
q = statistics.median(r[1] for r in rows)
s = statistics.median(r[2] for r in rows)
pc = statistics.median(r[3] for r in rows)
rc = statistics.median(r[4] for r in rows)
print(f"| median | {p:.0f} | {q:.0f} | {p/q:.2f} | {s:.0f} | {n/max(s,1):.1f} | {pc:.1f} | {rc:.1f} |")
EOF
