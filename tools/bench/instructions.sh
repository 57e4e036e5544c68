#!/usr/bin/env bash
# Instructions a pipelined command costs the server, counted by valgrind: a per-command cost
# measured without the noise of a shared machine.
#
# What it measures
#   For each binary given: `BIN serve --no-store --threads 1` (with STORE=1, `--store DIR` of its
#   own, `--durability everysec`) under valgrind's callgrind on a
#   loopback port picked at run time, then redis-benchmark -c 1 -P 16 -d 100 -r 1000, SMALL and
#   then LARGE requests of each test (GET, SET), each in a server of its own. The instructions
#   a request costs are (Ir of the LARGE run - Ir of the SMALL run) / (LARGE - SMALL): the
#   start-up and the stop cancel out. One client, so every batch the node reads is exactly one
#   pipeline of 16 whatever else the machine runs: with 50 clients the node's reads took what
#   had arrived, batches of other sizes from run to run, and a batch's fixed cost (the wait
#   for the socket) moved the count per request by up to 7%. It does not see cache misses or
#   the kernel, so it sizes a fixed per-command cost, not throughput
#   (tools/bench/pipelined_cells.sh and vs_redis.sh time that).
#
# How to read it
#   stdout: one markdown row per binary: instructions a GET and a SET, and each against the
#   first binary given.
#
# Usage
#   tools/bench/instructions.sh BIN...
#   env: SMALL (50000), LARGE (150000), STORE (0; 1: over a store, as above)
#
# Needs valgrind, redis-cli, redis-benchmark, python3 (tools/test.sh does not install
# valgrind: apt-get install valgrind). Every server started is stopped by its pid.
set -euo pipefail
SMALL=${SMALL:-50000} LARGE=${LARGE:-150000} STORE=${STORE:-0}
if (($# == 0)) || [[ $1 == -h || $1 == --help ]]; then
  sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
for tool in valgrind redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: needs $tool (apt-get install valgrind redis-tools python3)" >&2; exit 1; }
done
tmp=$(mktemp -d)
pid=
cleanup() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Prints the instructions the server ran for N requests of TEST (after start-up).
count() {
  local bin=$1 test=$2 n=$3 port out
  port=$(free_port)
  out=$tmp/callgrind.out
  local where=(--no-store)
  if ((STORE)); then
    rm -rf "$tmp/store"
    where=(--store "$tmp/store" --durability everysec)
  fi
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve --bind "127.0.0.1:$port" \
    "${where[@]}" --threads 1 2>/dev/null &
  pid=$!
  # Under valgrind the start takes seconds.
  for _ in $(seq 1 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  timeout 900 redis-benchmark -p "$port" -c 1 -P 16 -d 100 -r 1000 -t "$test" -n "$n" -q >/dev/null
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  awk '/^summary:/ { print $2 }' "$out"
}

echo "instructions a request, $(date -u +%F), callgrind, -c 1 -P 16, ($LARGE - $SMALL) requests, store $STORE"
echo
echo "| binary | GET | SET | GET, SET against the first |"
echo "|---|---:|---:|---|"
first=
for bin in "$@"; do
  row=()
  for test in get set; do
    a=$(count "$bin" "$test" "$SMALL")
    b=$(count "$bin" "$test" "$LARGE")
    row+=("$(( (b - a) / (LARGE - SMALL) ))")
  done
  [[ -z $first ]] && first="${row[*]}"
  python3 - "$bin" "${row[*]}" "$first" <<'PY'
import sys
b, (g, s), (g0, s0) = sys.argv[1], map(int, sys.argv[2].split()), map(int, sys.argv[3].split())
print(f"| {b} | {g:,} | {s:,} | {(g - g0) / g0:+.1%}, {(s - s0) / s0:+.1%} |")
PY
done
