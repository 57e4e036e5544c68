#!/usr/bin/env bash
# Rescale skew (issue 29): where a live cluster's slots, and so its next keys, end up after a
# commission and a decommission. docs/benchmarks.md, "Rescale: slots and new keys after
# commission and decommission", is this script's output.
#
# What it does, for each of two loads:
#   uniform   KEYS keys (key:0 … key:N-1, 100-byte values) set with `redis-cli -c`, spread over
#             the slots by their hash (the issue's "10,000 keys": most slots hold one key or none);
#   tagged    `redis-benchmark --cluster -t set -n KEYS -r 100000 -d 100`, which puts each
#             client's keys in one hash-tagged slot of its master: three slots hold all the data
#             (the issue's extreme case, where the new node got 0 slots);
# a fresh `pliant cluster up --nodes 3 --base-port 0` (embedded store), the load, then
# `pliant scale commission --add 1`, NEW new keys (new-a:0 …, `redis-cli -c`), then
# `pliant scale decommission` of the first node, NEW more (new-b:0 …). After each step
# `pliant cluster status --json`: every node's slots, ranges (runs of consecutive slots) and
# keys; the new keys per node are the differences of its key count.
#
# How to read it
#   stdout: one markdown table per load: a row per step and node (slots, ranges, keys, new keys
#   of that step and their share of even: 1.00 is an even share), then the commission's and the
#   decommission's planned moves and keys moved. "within 10%" holds when every new-key share
#   is in 0.90-1.10. Progress goes to stderr. The cluster directories are in a temp dir, removed
#   at the end; each `cluster up` is stopped by its pid (SIGTERM; it stops its nodes).
#
# Usage
#   tools/bench/rescale_skew.sh [--keys N] [--new N]
#   defaults: --keys 10000, --new 20000. Needs redis-cli, redis-benchmark and jq (Debian:
#   redis-tools, jq). env: PLIANT_BIN (a pliant binary instead of building the release one).
set -euo pipefail

KEYS=10000
NEW=20000
while [ $# -gt 0 ]; do
    case "$1" in
        --keys) KEYS=$2; shift 2 ;;
        --new) NEW=$2; shift 2 ;;
        *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
for tool in redis-cli redis-benchmark jq; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install redis-tools jq)" >&2; exit 2; }
done

root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${PLIANT_BIN:-}" ]; then
    (cd "$root" && cargo build --release --locked -p pliant >&2)
    PLIANT_BIN=${CARGO_TARGET_DIR:-$root/target}/release/pliant
fi
work=$(mktemp -d)
up_pid=""
cleanup() {
    if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
        kill -TERM "$up_pid"
        for _ in $(seq 300); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# `cluster status --json` at $1.
status() { "$PLIANT_BIN" cluster status "$1" --json --window 50ms; }

# Sets keys $2 .. $2+$3-1 named $1<i> through the cluster at $4 (host:port).
set_keys() {
    local prefix=$1 count=$2 at=$3
    seq 0 $((count - 1)) | awk -v p="$prefix" -v v="$(printf 'x%.0s' $(seq 100))" '{print "SET " p $1 " " v}' \
        | redis-cli -c -h "${at%:*}" -p "${at#*:}" >/dev/null
}

# Prints the rows of step $1: status $2 (JSON) against the key counts of status $3 (JSON), $4 new
# keys written in between (0: none).
rows() {
    local step=$1 now=$2 before=$3 new=$4
    jq -r --arg step "$step" --argjson before "$before" --argjson new "$new" '
        .nodes as $n | ($n | length) as $count |
        $n[] | . as $node |
        (($before.nodes | map(select(.id == $node.id)) | .[0].keys) // 0) as $was |
        "| \($step) | \(.id[0:8]) | \(.slots) | \(.ranges // "-") | \(.keys) | " +
        (if $new > 0 then "\(.keys - $was) | \(((.keys - $was) / ($new / $count) * 100 | round) / 100)"
         else "- | -" end) + " |"' <<<"$now"
}

run() {
    local load=$1 dir="$work/$1"
    echo "== $load: cluster up" >&2
    "$PLIANT_BIN" cluster up --nodes 3 --base-port 0 --json --dir "$dir" >"$work/$load.up" 2>"$work/$load.log" &
    up_pid=$!
    for _ in $(seq 600); do [ -s "$work/$load.up" ] && break; sleep 0.1; done
    [ -s "$work/$load.up" ] || { echo "cluster up did not come up: $(tail "$work/$load.log")" >&2; exit 1; }
    local a0 first
    a0=$(jq -r '.nodes[0].addr' "$work/$load.up")
    first=$(jq -r '.nodes[0].id' "$work/$load.up")
    echo "== $load: $KEYS keys" >&2
    if [ "$load" = uniform ]; then
        set_keys key: "$KEYS" "$a0"
    else
        redis-benchmark --cluster -h "${a0%:*}" -p "${a0#*:}" -t set -n "$KEYS" -r 100000 -d 100 -q >/dev/null
    fi
    local s0 s1 s2 s3 s4 add rem a1
    s0=$(status "$a0")
    echo "== $load: commission --add 1" >&2
    add=$("$PLIANT_BIN" scale commission --cluster "$a0" --add 1 --window 500ms --json)
    s1=$(status "$a0")
    set_keys new-a: "$NEW" "$a0"
    s2=$(status "$a0")
    a1=$(jq -r --arg f "$first" '[.nodes[] | select(.id != $f)][0].addr' <<<"$s2")
    echo "== $load: decommission ${first:0:8}" >&2
    rem=$("$PLIANT_BIN" scale decommission --cluster "$a1" --remove "$first" --window 500ms --json)
    s3=$(status "$a1")
    set_keys new-b: "$NEW" "$a1"
    s4=$(status "$a1")
    echo
    echo "### $load: $KEYS keys ($( [ "$load" = uniform ] && echo "redis-cli -c" || echo "redis-benchmark --cluster"))"
    echo
    echo "| step | node | slots | ranges | keys | new keys | share of even |"
    echo "|---|---|---|---|---|---|---|"
    rows "3 nodes, loaded" "$s0" "$s0" 0
    rows "+1" "$s1" "$s0" 0
    rows "+1, $NEW new keys" "$s2" "$s1" "$NEW"
    rows "−1" "$s3" "$s2" 0
    rows "−1, $NEW new keys" "$s4" "$s3" "$NEW"
    echo
    jq -r '"commission: \(.moves) slot moves planned (\(.planned_bytes / 1e6 * 100 | round / 100) MB), \(.keys_moved) keys moved in \(.seconds * 100 | round / 100) s"' <<<"$add"
    jq -r '"decommission: \(.moves) slot moves planned (\(.planned_bytes / 1e6 * 100 | round / 100) MB), \(.keys_moved) keys moved in \(.seconds * 100 | round / 100) s"' <<<"$rem"
    kill -TERM "$up_pid"
    for _ in $(seq 300); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
    up_pid=""
}

echo "# Rescale skew: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD), $KEYS keys, $NEW new keys per step"
run uniform
run tagged
