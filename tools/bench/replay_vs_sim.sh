#!/usr/bin/env bash
# The whole d100K WorkManager trace replayed through a live `pliant serve` node and through
# `pliant sim`, for LRU, S3-FIFO and SIEVE at 100 keys: the node's memory-tier misses
# (PLIANT.STATS) must equal the simulator's. The suite checks the same on a 500,000-line prefix
# (crates/pliant/tests/serve_cli.rs); this is the long version whose result is in the README.
#
#   tools/bench/replay_vs_sim.sh [TRACE] [SIZE]
#
# Needs ../shared (or a TRACE argument). Loopback only; every server is stopped by its pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
trace=${1:-../shared/traces/parsplice/d100K/rank4.csv.gz}
size=${2:-100keys}
[ -e "$trace" ] || { echo "replay_vs_sim: $trace not found" >&2; exit 1; }
cargo build --release --locked -q
bin=target/release/pliant
tmp=$(mktemp -d)
source tools/lib/node.sh
cleanup() { stop_node; rm -rf "$tmp"; }
trap cleanup EXIT

sim=$("$bin" sim "$trace" --algo lru,s3fifo,sieve --size "$size" --json)
echo "| algorithm | pliant sim misses | pliant serve misses (PLIANT.STATS) | replay ops/s | equal |"
echo "|---|---|---|---|---|"
status=0
for i in 0 1 2; do
  algo=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])[$i]['algo'])" "$sim")
  expected=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])[$i]['misses'])" "$sim")
  start_node "$bin" "$tmp/serve-$algo.log" --store "$tmp/store-$algo" --algo "$algo" --capacity "$size"
  out=$("$bin" replay "$trace" --server "$node_addr" --pipeline 64 --json)
  stop_node
  got=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['server_stats']['misses'])" "$out")
  ops=$(python3 -c "import json,sys; print(round(json.loads(sys.argv[1])['ops_per_s']))" "$out")
  same=yes; [ "$got" = "$expected" ] || { same=NO; status=1; }
  echo "| $algo | $expected | $got | $ops | $same |"
done
exit $status
