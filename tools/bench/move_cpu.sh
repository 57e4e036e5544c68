#!/usr/bin/env bash
# The CPU a key's slot move costs the nodes, quickly and for two binaries side by side (issue 34:
# what sets the pace of a move on a machine of a few cores is this CPU, not the link).
#
# What it measures
#   For each round and each binary in turn (alternating, so drift on a shared machine falls on
#   both): `pliant cluster up --nodes 3 --base-port 0 -- --durability everysec` in a temp dir,
#   KEYS keys of VALUE bytes loaded over every slot (`rescale_scale.py load`: one `redis-cli
#   --pipe` per master, every SET acknowledged), then one idle `pliant scale commission --add 1`.
#   The nodes' user + system CPU (from /proc, the supervisor's children, the new node from its
#   start) during the commission, over the keys it moved: µs a key. The command that orders the
#   move is not counted (it only orders and shows progress). Beside it, the move's wall time
#   (the report's `seconds`): on a machine of few cores the two go together.
#
# Usage
#   tools/bench/move_cpu.sh [--keys N] [--value BYTES] [--rounds N] [--json FILE] BINARY [BINARY]
#   defaults: 300,000 keys of 1,024 bytes (a commission moves about a quarter), 3 rounds.
#   Prints a line per run and the medians per binary; --json writes every run.
#
# Needs redis-cli (apt-get install redis-tools) and python3. Loopback only, ports picked at run
# time; everything in one temp dir removed at exit; the supervisor stopped by its pid, every
# wait bounded.

set -euo pipefail

KEYS=300000 VALUE=1024 ROUNDS=3 JSON_OUT=""
need() { [[ $# -ge 2 ]] || { echo "move_cpu.sh: $1 needs a value" >&2; exit 2; }; }
BINS=()
while (($#)); do
  case "$1" in
    --keys) need "$@"; KEYS=$2; shift ;;
    --value) need "$@"; VALUE=$2; shift ;;
    --rounds) need "$@"; ROUNDS=$2; shift ;;
    --json) need "$@"; JSON_OUT=$(realpath -m -- "$2"); shift ;;
    -h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "move_cpu.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
    *) BINS+=("$(realpath -- "$1")") ;;
  esac
  shift
done
((${#BINS[@]} >= 1 && ${#BINS[@]} <= 2)) || { echo "move_cpu.sh: give one or two binaries (try --help)" >&2; exit 2; }
for b in "${BINS[@]}"; do [[ -x $b ]] || { echo "move_cpu.sh: $b is not an executable" >&2; exit 2; }; done
command -v redis-cli >/dev/null || { echo "move_cpu.sh: needs redis-cli (apt-get install redis-tools)" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)

WORK=$(mktemp -d /tmp/pliant-move-cpu.XXXXXX)
SUP=""
stop_cluster() {
  if [[ -n $SUP ]]; then
    kill "$SUP" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SUP" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SUP" 2>/dev/null || true
    wait "$SUP" 2>/dev/null || true
    SUP=""
  fi
}
trap 'stop_cluster; rm -rf "$WORK"' EXIT

# user + system ticks of each child of the supervisor: "pid ticks" lines.
cpu() { for p in $(pgrep -P "$SUP"); do awk -v p="$p" '{print p, $14 + $15}' "/proc/$p/stat" 2>/dev/null || true; done; }

one() { # BINARY RUN-DIR: prints a JSON line
  local bin=$1 w=$2
  mkdir -p "$w"
  "$bin" cluster up --nodes 3 --base-port 0 --json --dir "$w/c" -- --durability everysec \
    >"$w/up.json" 2>"$w/up.log" </dev/null &
  SUP=$!
  for _ in $(seq 600); do [[ -s $w/up.json ]] && break; sleep 0.1; done
  [[ -s $w/up.json ]] || { echo "move_cpu.sh: the cluster did not come up within 60 s: $w/up.log" >&2; cat "$w/up.log" >&2; exit 1; }
  local seed
  seed=$(head -n1 "$w/up.json" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["nodes"][0]["addr"])')
  timeout 1200 python3 "$HERE/rescale_scale.py" load --seed "$seed" --keys "$KEYS" --value "$VALUE" --tmp "$w" >"$w/load.json" 2>"$w/load.err" \
    || { echo "move_cpu.sh: loading failed:" >&2; cat "$w/load.err" >&2; exit 1; }
  sleep 2
  cpu >"$w/before"
  timeout 1200 "$bin" scale commission --cluster "$seed" --add 1 --json >"$w/report.json" 2>"$w/scale.err" \
    || { echo "move_cpu.sh: the commission failed:" >&2; cat "$w/scale.err" >&2; exit 1; }
  cpu >"$w/after"
  stop_cluster
  python3 - "$w" "$bin" "$(getconf CLK_TCK)" <<'PY'
import json, sys
w, binary, tck = sys.argv[1], sys.argv[2], int(sys.argv[3])
read = lambda f: dict(l.split() for l in open(f"{w}/{f}") if l.strip())
before, after = read("before"), read("after")
r = json.load(open(f"{w}/report.json"))
cpu = sum(int(v) - int(before.get(p, 0)) for p, v in after.items()) / tck
keys = r["keys_moved"]
print(json.dumps({"binary": binary, "keys_moved": keys, "bytes_moved": r["bytes_moved"],
                  "seconds": r["seconds"], "cpu_seconds": cpu,
                  "cpu_us_per_key": cpu / keys * 1e6 if keys else None}))
PY
}

RUNS=$WORK/runs.jsonl
: >"$RUNS"
for ((r = 1; r <= ROUNDS; r++)); do
  for i in "${!BINS[@]}"; do
    # Not in a $(…) subshell: the supervisor's pid must reach the EXIT trap if a run fails.
    one "${BINS[$i]}" "$WORK/r$r-b$i" >"$WORK/line"
    line=$(<"$WORK/line")
    echo "$line" >>"$RUNS"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); b,k,s,c,u=d["binary"],d["keys_moved"],d["seconds"],d["cpu_seconds"],d["cpu_us_per_key"]; print(f"round {sys.argv[2]}: {b}: {k:,} keys in {s:.3f} s, {c:.2f} CPU s, {u:.1f} µs a key")' "$line" "$r"
    rm -rf "$WORK/r$r-b$i"
  done
done
python3 - "$RUNS" "$JSON_OUT" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for b in dict.fromkeys(r["binary"] for r in runs):
    us = [r["cpu_us_per_key"] for r in runs if r["binary"] == b]
    secs = [r["seconds"] for r in runs if r["binary"] == b]
    print(f"{b}: median {statistics.median(us):.1f} µs a key (runs: {', '.join(f'{u:.1f}' for u in us)}),"
          f" {statistics.median(secs):.2f} s a move (runs: {', '.join(f'{t:.2f}' for t in secs)})")
if sys.argv[2]:
    json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
PY
