#!/usr/bin/env bash
# How long an idle commission's moves take against the batch a source node sends its target
# (`pliant scale commission --batch-bytes`): the sensitivity of the default (1 MiB).
#
# What it measures
#   For each round and each batch size (the order the same every round, so drift on a shared
#   machine hits all alike): a fresh `pliant cluster up --nodes 3` (stores, --durability
#   everysec) in a temp dir, KEYS keys of VALUE bytes over every slot (rescale_scale.py load: one
#   `redis-cli --pipe` per master, every SET acknowledged), then `pliant scale commission --add 1
#   --window 200ms --batch-bytes SIZE --json`, nothing else running. Its report's `seconds` (the
#   moves' wall time), `bytes_moved` and `planned.t_t` (Pufferscale's T_t at the bandwidth it
#   measured).
#
# How to read it
#   stdout: one markdown row per batch size: the median seconds and seconds / T_t over the
#   rounds, and every round's seconds. Lower is better; differences under ~30% are within this
#   2-core machine's noise between rounds.
#
# Usage
#   tools/bench/move_batch.sh [SIZE...]       (default sizes: 256KiB 1MiB 4MiB 16MiB)
#   env: ROUNDS (3), KEYS (200000), VALUE (1024), PLIANT_BIN (a pliant binary instead of
#        building target/release/pliant)
#
# Needs redis-cli, python3, cargo. Loopback only (ports the cluster picks at run time); each
# cluster's supervisor is stopped by its pid (it stops its nodes); the temp dirs are removed.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3} KEYS=${KEYS:-200000} VALUE=${VALUE:-1024}
SIZES=("$@")
((${#SIZES[@]})) || SIZES=(256KiB 1MiB 4MiB 16MiB)
for tool in redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "move_batch.sh: needs $tool" >&2; exit 1; }
done
if [[ -n ${PLIANT_BIN:-} ]]; then
  BIN=$PLIANT_BIN
else
  cargo build --release --locked -q
  BIN=target/release/pliant
fi

sup='' dir=''
cleanup() {
  if [[ -n $sup ]]; then
    kill "$sup" 2>/dev/null || true
    wait "$sup" 2>/dev/null || true
    sup=
  fi
  [[ -z $dir ]] || rm -rf "$dir"
  dir=
}
trap cleanup EXIT

# One commission at batch size $1: prints "seconds t_t".
one() {
  dir=$(mktemp -d)
  "$BIN" cluster up --json --dir "$dir/c" --nodes 3 --base-port 0 -- --durability everysec \
    >"$dir/up.json" 2>"$dir/up.err" &
  sup=$!
  for _ in $(seq 1 300); do [[ -s $dir/up.json ]] && break; sleep 0.1; done
  [[ -s $dir/up.json ]] || { echo "move_batch.sh: the cluster did not start: $(tail -5 "$dir/up.err")" >&2; exit 1; }
  local seed
  seed=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["nodes"][0]["addr"])' "$dir/up.json")
  python3 tools/bench/rescale_scale.py load --seed "$seed" --keys "$KEYS" --value "$VALUE" \
    --tmp "$dir" >"$dir/load.json"
  timeout 600 "$BIN" scale commission --cluster "$seed" --add 1 --window 200ms \
    --batch-bytes "$1" --json >"$dir/report.json" 2>"$dir/report.err" ||
    { echo "move_batch.sh: the commission failed: $(tail -5 "$dir/report.err")" >&2; exit 1; }
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["seconds"], r["planned"]["t_t"])' \
    "$dir/report.json"
  cleanup
}

echo "move batch, $(date -u +%F), $(nproc) cores, $KEYS keys of $VALUE B over 3 nodes, commission --add 1, $ROUNDS rounds"
echo
declare -A runs
for _ in $(seq 1 "$ROUNDS"); do
  for s in "${SIZES[@]}"; do
    runs[$s]+="$(one "$s");"
  done
done
echo "| --batch-bytes | seconds (median) | seconds / T_t (median) | rounds: seconds |"
echo "|---|---:|---:|---|"
for s in "${SIZES[@]}"; do
  python3 - "$s" "${runs[$s]}" <<'EOF'
import statistics, sys
rows = [tuple(map(float, r.split())) for r in sys.argv[2].split(";") if r.strip()]
secs = [s for s, _ in rows]
ratio = [s / t for s, t in rows if t > 0]
print(f"| {sys.argv[1]} | {statistics.median(secs):.3f} | {statistics.median(ratio):.1f} | "
      + " ".join(f"{s:.3f}" for s in secs) + " |")
EOF
done
