#!/usr/bin/env bash
# Store reads and everyone else: does one client's read from the store stall the clients whose
# keys memory holds?
#
# What it measures
#   One store of HOT_KEYS + COLD_KEYS keys of VALUE_SIZE bytes ("hot:%012d", "cold:%012d", the
#   names redis-benchmark's __rand_int__ makes), served by `pliant serve --store DIR --capacity
#   CAPACITY` with memory far smaller than the data. After the hot keys are read once (memory
#   holds them from then on), two runs of redis-benchmark, HOT_CLIENTS (50) clients, N GETs of
#   random hot keys:
#     alone        nothing else runs;
#     with misses  COLD_CLIENTS (5) more clients GET random cold keys the whole time, each a miss
#                  that memory cannot serve and the store must.
#   The figure is the p99 latency of the hot GETs (redis-benchmark's own). Before, a miss read the
#   store with the keyspace locked, so every hot GET queued behind it; now the store is read off
#   the lock and the hot clients should barely notice (the target: "with misses" within 2x of
#   "alone"). With DROP_CACHES=1 (root) the page cache is dropped before each "with misses" run,
#   so the misses are disk reads, not copies from the kernel's cache. With SLOW=RATE (e.g. 50MB)
#   the store lives on `pliant bench slow-fs` (a FUSE passthrough with direct I/O whose every
#   data request takes bytes / RATE seconds, as a parallel file system's stream would): every
#   store read that the store's own cache misses is a slow remote read, the case this is about.
#   Each binary given is measured ROUNDS times, in turn, on the same store. With PIN=1 the node
#   runs on CPU 0 and everything else (both redis-benchmarks, the slow file system) on CPU 1, as
#   clients and a parallel file system run on other machines: what the store readers then cost
#   the hot clients is the node's own doing, not two cores shared by five programs.
#
# How to read it
#   stdout: a markdown row per binary: the median over rounds of the hot GETs' p99 alone and with
#   misses, their ratio, the hot GETs/s of both, and the misses served by the store per second
#   (INFO's store_reads over the run), and the share of them read off the lock (store_reads_off_lock;
#   0 for a binary older than that). Every round's figures go to stderr.
#
# Usage
#   tools/bench/store_miss_p99.sh [--quick] [BIN...]
#   BIN: pliant binaries to compare (e.g. one built at an older commit); default: this tree's
#   release build. env: ROUNDS (3), N (300000), HOT_CLIENTS (50), COLD_CLIENTS (5),
#   HOT_KEYS (1000), COLD_KEYS (200000), VALUE_SIZE (1024), CAPACITY (20000keys), DROP_CACHES (0),
#   SLOW (unset: the store on the temp dir's own file system), PIN (0; 1: see above, needs
#   taskset)
#   --quick: ROUNDS=1, N=50000, COLD_KEYS=20000.
#
# Needs redis-cli, redis-benchmark, python3, cargo; with SLOW, /dev/fuse and fusermount3. Loopback only, ports chosen at run time; every
# process started is stopped by its pid; the temp dir is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3} N=${N:-300000} HOT_CLIENTS=${HOT_CLIENTS:-50} COLD_CLIENTS=${COLD_CLIENTS:-5}
HOT_KEYS=${HOT_KEYS:-1000} COLD_KEYS=${COLD_KEYS:-200000} VALUE_SIZE=${VALUE_SIZE:-1024}
CAPACITY=${CAPACITY:-20000keys} DROP_CACHES=${DROP_CACHES:-0} SLOW=${SLOW:-} PIN=${PIN:-0}
bins=()
for arg in "$@"; do
  case "$arg" in
    --quick) ROUNDS=1 N=50000 COLD_KEYS=20000 ;;
    -h | --help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "store_miss_p99.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
    *) bins+=("$arg") ;;
  esac
done
for tool in redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "store_miss_p99.sh: needs $tool (apt-get install redis-tools python3)" >&2; exit 1; }
done
if ((DROP_CACHES)) && [[ $(id -u) != 0 ]]; then
  echo "store_miss_p99.sh: DROP_CACHES=1 needs root (it writes /proc/sys/vm/drop_caches)" >&2
  exit 1
fi
if ((${#bins[@]} == 0)); then
  cargo build --release --locked -q
  bins=(target/release/pliant)
fi

OTHERS=()
if ((PIN)); then
  command -v taskset >/dev/null || { echo "store_miss_p99.sh: PIN=1 needs taskset (util-linux)" >&2; exit 1; }
  OTHERS=(taskset -c 1)
fi
# The node, and every thread it starts later (they inherit it), on CPU 0.
pin_node() { if ((PIN)); then taskset -a -p -c 0 "$node_pid" >/dev/null; fi; }

tmp=$(mktemp -d)
source tools/lib/node.sh
cold_pid= slow_pid=
cleanup() {
  if [[ -n $cold_pid ]]; then kill "$cold_pid" 2>/dev/null || true; wait "$cold_pid" 2>/dev/null || true; fi
  stop_node
  # SIGTERM unmounts the slow file system before it exits.
  if [[ -n $slow_pid ]]; then kill "$slow_pid" 2>/dev/null || true; wait "$slow_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

store_reads() { redis-cli -p "$1" info pliant | tr -d '\r' | sed -n "s/^$2://p"; }

# "ops/s p99_ms" of redis-benchmark's GETs of random hot keys against port $1.
hot() {
  timeout 600 "${OTHERS[@]}" redis-benchmark -p "$1" -c "$HOT_CLIENTS" -n "$2" -r "$HOT_KEYS" --csv GET 'hot:__rand_int__' \
    | awk -F'"' '/^"GET/ { print $4, $14 }'
}

# The store: written once through the first binary, then read by every binary in turn.
store="$tmp/store"
if [[ -n $SLOW ]]; then
  mkdir -p "$tmp/slow-backing" "$tmp/slow"
  "${OTHERS[@]}" "${bins[0]}" bench slow-fs "$tmp/slow-backing" "$tmp/slow" --stream-rate "$SLOW" >"$tmp/slow-fs.log" 2>&1 &
  slow_pid=$!
  for _ in $(seq 1 100); do mountpoint -q "$tmp/slow" && break; sleep 0.1; done
  mountpoint -q "$tmp/slow" || { echo "store_miss_p99.sh: the slow file system did not mount: $(cat "$tmp/slow-fs.log")" >&2; exit 1; }
  store="$tmp/slow/store"
fi
start_node "${bins[0]}" "$tmp/load.log" --store "$store" --durability none
python3 - "$HOT_KEYS" "$COLD_KEYS" "$VALUE_SIZE" >"$tmp/load.resp" <<'EOF'
import sys
hot, cold, size = map(int, sys.argv[1:])
v = b"v" * size
out = sys.stdout.buffer
for name, n in ((b"hot", hot), (b"cold", cold)):
    for i in range(n):
        k = b"%s:%012d" % (name, i)
        out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
EOF
timeout 600 redis-cli -p "$node_port" --pipe <"$tmp/load.resp" >/dev/null
rm -f "$tmp/load.resp"
stop_node

where="the temp dir's file system"
[[ -n $SLOW ]] && where="slow-fs at $SLOW/s a stream"
echo "store misses and in-memory GETs, $(date -u +%F), $(nproc) cores, $(uname -r), $HOT_CLIENTS clients on $HOT_KEYS hot keys, $COLD_CLIENTS on $COLD_KEYS cold keys, ${VALUE_SIZE} B values, memory $CAPACITY, drop caches $DROP_CACHES, store on $where, pinned $PIN"
echo
echo "| binary | hot p99 alone (ms) | hot p99 with misses (ms) | with/alone | hot GET/s alone | hot GET/s with misses | store reads/s | share read off the lock |"
echo "|---|---|---|---|---|---|---|---|"
for bin in "${bins[@]}"; do
  rows=()
  for r in $(seq 1 "$ROUNDS"); do
    start_node "$bin" "$tmp/serve.log" --store "$store" --capacity "$CAPACITY" --durability none
    pin_node
    # Memory holds the hot keys from here on: each is read at least once (most several times).
    hot "$node_port" $((HOT_KEYS * 20)) >/dev/null
    read -r a_ops a_p99 < <(hot "$node_port" "$N")
    if ((DROP_CACHES)); then sync; echo 3 >/proc/sys/vm/drop_caches; fi
    "${OTHERS[@]}" redis-benchmark -p "$node_port" -c "$COLD_CLIENTS" -n 1000000000 -r "$COLD_KEYS" -q GET 'cold:__rand_int__' >/dev/null 2>&1 &
    cold_pid=$!
    sleep 1
    before=$(store_reads "$node_port" store_reads)
    off_before=$(store_reads "$node_port" store_reads_off_lock)
    t0=$(date +%s.%N)
    read -r b_ops b_p99 < <(hot "$node_port" "$N")
    t1=$(date +%s.%N)
    after=$(store_reads "$node_port" store_reads)
    off_after=$(store_reads "$node_port" store_reads_off_lock)
    costs=$(redis-cli -p "$node_port" info pliant | tr -d '\r' | sed -n 's/^store_\(read\|handoff\)_usec:\(.*\)/\1 \2 us/p' | paste -sd, -)
    kill "$cold_pid" 2>/dev/null || true
    wait "$cold_pid" 2>/dev/null || true
    cold_pid=
    stop_node
    reads=$(python3 -c "import sys; a,b,t0,t1=map(float,sys.argv[1:]); print(f'{(b-a)/(t1-t0):.0f}')" "$before" "$after" "$t0" "$t1")
    # A binary older than the off-lock reads reports none (empty).
    off=$(( ${off_after:-0} - ${off_before:-0} ))
    echo "$bin round $r: alone p99 $a_p99 ms ($a_ops GET/s); with misses p99 $b_p99 ms ($b_ops GET/s), $reads store reads/s, $off of them off the lock (${costs:-no read costs reported})" >&2
    share=$(python3 -c "import sys; o,a,b=map(float,sys.argv[1:]); print(f'{o/max(b-a,1):.2f}')" "$off" "$before" "$after")
    rows+=("$a_p99 $b_p99 $a_ops $b_ops $reads $share")
  done
  python3 - "$bin" "${rows[@]}" <<'EOF'
import statistics, sys
bin = sys.argv[1]
rows = [list(map(float, r.split())) for r in sys.argv[2:]]
m = [statistics.median(r[i] for r in rows) for i in range(6)]
print(f"| {bin} | {m[0]:.3f} | {m[1]:.3f} | {m[1]/m[0]:.2f} | {m[2]:.0f} | {m[3]:.0f} | {m[4]:.0f} | {m[5]:.2f} |")
EOF
done
