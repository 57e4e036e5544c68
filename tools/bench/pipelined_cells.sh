#!/usr/bin/env bash
# Pipelined SET and GET of several pliant binaries side by side: for bisecting a per-command cost.
#
# What it measures
#   For each binary given, in turn and ROUNDS times (the order repeats every round, so drift on a
#   shared machine hits all alike): `BIN serve --no-store` on a loopback port picked at run time,
#   then redis-benchmark -c 50 -P 16 -d 100 -r 100000, N SETs and then 2N GETs. No Redis: the
#   figures compare binaries with each other in one sitting (tools/bench/vs_redis.sh compares with
#   Redis).
#
# How to read it
#   stdout: one markdown row per binary, the median SET and GET ops/s over the rounds, and every
#   round's figures.
#
# Usage
#   tools/bench/pipelined_cells.sh BIN...
#   env: ROUNDS (4), N (1000000)
#
# Needs redis-cli, redis-benchmark, python3. Every server started is stopped by its pid.
set -euo pipefail
ROUNDS=${ROUNDS:-4} N=${N:-1000000}
if (($# == 0)) || [[ $1 == -h || $1 == --help ]]; then
  sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
for tool in redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "pipelined_cells.sh: needs $tool" >&2; exit 1; }
done
pid=
cleanup() { if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
ops() { awk -F'"' -v t="$1" '$2 == t { print $4 }'; }

declare -A sets gets
for r in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    port=$(free_port)
    "$bin" serve --bind "127.0.0.1:$port" --no-store 2>/dev/null &
    pid=$!
    for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    s=$(timeout 600 redis-benchmark -p "$port" -c 50 -P 16 -d 100 -r 100000 -t set -n "$N" --csv | ops SET)
    g=$(timeout 600 redis-benchmark -p "$port" -c 50 -P 16 -d 100 -r 100000 -t get -n $((2 * N)) --csv | ops GET)
    cleanup
    pid=
    sets[$bin]+=" $s"
    gets[$bin]+=" $g"
  done
done
echo "pipelined cells, $(date -u +%F), $(nproc) cores, $ROUNDS rounds, -c 50 -P 16, $N SETs and $((2 * N)) GETs a round"
echo
echo "| binary | SET ops/s (median) | GET ops/s (median) | rounds: SET / GET |"
echo "|---|---:|---:|---|"
for bin in "$@"; do
  python3 - "$bin" "${sets[$bin]}" "${gets[$bin]}" <<'EOF'
import statistics, sys
b, s, g = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
print(f"| {b} | {statistics.median(s):,.0f} | {statistics.median(g):,.0f} | "
      f"{' '.join(f'{x/1e3:.0f}k' for x in s)} / {' '.join(f'{x/1e3:.0f}k' for x in g)} |")
EOF
done
