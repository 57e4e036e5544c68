#!/usr/bin/env bash
# What a tier costs and saves: redis-benchmark against a store node directly and through a leaf
# (`pliant serve --parent`) over it.
#
# What it measures
#   A store node (`--store DIR --durability everysec`) and one leaf over it (`--parent`, an
#   unlimited memory tier). Every key of KEYSPACE is first written through the leaf (redis-cli
#   --pipe), so it holds them all, as a tier keeps its puts. Then SET and GET, 50 clients, 100-byte
#   values, keys drawn from KEYSPACE, at -P 1 and -P 16:
#     parent  redis-benchmark against the store node
#     leaf    redis-benchmark against the leaf (GETs are memory hits there; SETs go through to the
#             parent, each acknowledged once the parent has it)
#   and, for the misses, GET through a second, empty leaf of 100 keys (almost every GET goes up).
#   One run each, ROUNDS times, the median; leaf/parent is the ratio (above 1: the leaf is faster).
#
# Usage
#   tools/bench/tiers.sh [--quick]
#   env: ROUNDS (3), N (200000), KEYSPACE (100000), PLIANT_BIN (default: builds target/release/pliant)
#   --quick: ROUNDS=1, N=20000 (a smoke test)
#
# Needs redis-benchmark and redis-cli (apt-get install redis-tools) and cargo. Listens on 127.0.0.1 only, on
# ports picked at run time; everything lives in a temp dir removed at exit; every node is stopped
# by its pid.

set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
N=${N:-200000}
KEYSPACE=${KEYSPACE:-100000}
case "${1:-}" in
    --quick) ROUNDS=1; N=20000 ;;
    -h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac
for t in redis-benchmark redis-cli; do
    command -v $t >/dev/null || { echo "tiers.sh: needs $t (apt-get install redis-tools)" >&2; exit 1; }
done

BIN=${PLIANT_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --release --locked -q
    BIN=target/release/pliant
fi

# shellcheck source=tools/lib/node.sh
source tools/lib/node.sh
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

start() { # start NAME ARGS…: sets ${NAME}_port
    local name=$1; shift
    start_node "$BIN" "$tmp/$name.log" "$@"
    pids+=("$node_pid")
    printf -v "${name}_port" '%s' "$node_port"
}

# ops/s of one redis-benchmark run: bench PORT TEST PIPELINE
bench() {
    redis-benchmark -h 127.0.0.1 -p "$1" -t "$2" -P "$3" -c 50 -n "$N" -d 100 -r "$KEYSPACE" -q --csv \
        | awk -F'","' 'NR > 1 { gsub(/"/, "", $2); print $2; exit }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

start parent --store "$tmp/store" --durability everysec
start leaf --parent "127.0.0.1:$parent_port"
start cold --parent "127.0.0.1:$parent_port" --capacity 100keys

# Every key of the keyspace is written through the leaf first (the names redis-benchmark's -r
# draws: key:%012d), so the leaf holds them all (a tier keeps its puts) and GET finds every key.
awk -v n="$KEYSPACE" 'BEGIN {
    v = sprintf("%100s", ""); gsub(/ /, "x", v)
    for (i = 0; i < n; i++) printf "*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$100\r\n%s\r\n", i, v
}' | redis-cli -p "$leaf_port" --pipe >/dev/null

echo "| cell | parent ops/s | leaf ops/s | leaf / parent |"
echo "|---|---:|---:|---:|"
for p in 1 16; do
    for t in set get; do
        par=(); lf=()
        for _ in $(seq "$ROUNDS"); do
            par+=("$(bench "$parent_port" "$t" "$p")")
            lf+=("$(bench "$leaf_port" "$t" "$p")")
        done
        a=$(printf '%s\n' "${par[@]}" | median)
        b=$(printf '%s\n' "${lf[@]}" | median)
        awk -v t="${t^^}" -v p="$p" -v a="$a" -v b="$b" \
            'BEGIN { printf "| %s, -P %s | %.0f | %.0f | %.2f |\n", t, p, a, b, b / a }'
    done
done
for p in 1 16; do
    cold=()
    for _ in $(seq "$ROUNDS"); do cold+=("$(bench "$cold_port" get "$p")"); done
    printf '| GET, -P %s, through a 100-key leaf (misses go up) | | %.0f | |\n' "$p" "$(printf '%s\n' "${cold[@]}" | median)"
done
echo
echo "cold leaf: $(redis-cli -p "$cold_port" PLIANT.STATS 2>/dev/null || true)"
