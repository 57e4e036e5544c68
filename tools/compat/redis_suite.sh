#!/usr/bin/env bash
# Redis's own test suite (the tests/ of the Redis source that matches the installed redis-tools)
# against a real `pliant serve`, one unit at a time on a fresh node: passes, failures with their
# reasons, and the tests left out by tag, per unit. Fails if a unit passes fewer tests than its
# floor below. .ci/run runs it; so can anyone:
#
#   tools/compat/redis_suite.sh [--json FILE] [--markdown] [--logs DIR] [--unit NAME]...
#
#   --json FILE   writes the results (every unit, every failure and its reason) as JSON
#   --markdown    prints the table and the failures grouped as docs/benchmarks.md shows them
#   --logs DIR    keeps each unit's runtest output (DIR/<unit>.out) and node log
#   --unit NAME   runs only that unit (repeatable), e.g. --unit type/string
#   --bin FILE    runs that pliant binary instead of building target/release/pliant
#
# The source comes from `apt-get source redis` (a deb-src entry is added beside Debian's own if
# there is none) and is kept out of the repository, in ${XDG_CACHE_HOME:-~/.cache}/pliant/redis-src,
# for later runs. Installs what is missing as root (redis-tools, tcl, dpkg-dev) with apt-get, or
# names it and stops. Loopback only: every node is on a port chosen free at run time and stopped
# by its pid; every unit is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/../.."
me=$(basename "$0")

json=
markdown=0
logs=
only=()
bin=
while [ $# -gt 0 ]; do
  case $1 in
    --json) json=${2:?--json needs a file}; shift 2 ;;
    --markdown) markdown=1; shift ;;
    --logs) logs=${2:?--logs needs a directory}; shift 2 ;;
    --unit) only+=("${2:?--unit needs a unit name}"); shift 2 ;;
    --bin) bin=$(realpath "${2:?--bin needs a file}"); shift 2 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$me: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# The units the issue names, and the tests each passed on 2026-11-27 at 62711e0 (Redis 7.0.15's
# tests): fewer is a regression and fails the run (raising a floor is a commit of its own).
# `auth` runs in spawned mode (below).
units=(type/string type/incr expire keyspace protocol multi info-command scan auth)
declare -A floor=(
  [type/string]=41 [type/incr]=10 [expire]=49 [keyspace]=18 [protocol]=14
  [multi]=21 [info-command]=3 [scan]=5 [auth]=8
)
if [ ${#only[@]} -gt 0 ]; then
  for u in "${only[@]}"; do
    [ -n "${floor[$u]+set}" ] || { echo "$me: --unit $u: not one of: ${units[*]}" >&2; exit 2; }
  done
  units=("${only[@]}")
fi

# Tags left out, each a feature outside a cache server's scope (tests/README.md lists them):
#   needs:repl     replication (SYNC / REPLICAOF / a replica's stream)
#   needs:debug    the DEBUG command and OBJECT-style internals (DEBUG SLEEP, RELOAD, PROTOCOL…)
#   needs:save     RDB persistence (SAVE)
#   needs:pfdebug  HyperLogLog's PFDEBUG
#   masterauth     auth.tcl's replica authenticating to its master (replication again)
# Kept, since a cache must meet them: needs:config-maxmemory (CONFIG SET maxmemory and the
# eviction policy), needs:config-resetstat, needs:reset. Two more filters come from the run mode
# itself: --singledb, because a node has database 0 only (as a Redis Cluster node), skips the
# tests tagged singledb:skip (SELECT, MOVE, SWAPDB, COPY … DB); external mode skips the tests
# Redis tags external:skip (they restart or reconfigure the server they run on).
tags="-needs:repl -needs:debug -needs:save -needs:pfdebug -masterauth"
unit_timeout=${REDIS_SUITE_UNIT_TIMEOUT:-180}

source tools/lib/clients.sh
need_apt redis-tools redis-cli
need_apt tcl8.6 tclsh8.6
need_apt dpkg-dev dpkg-source

# The installed redis-tools' Debian version (5:7.0.15-1~deb12u10) and upstream version (7.0.15).
debver=$(dpkg-query -W -f='${Version}' redis-tools)
upver=${debver#*:}
upver=${upver%%-*}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pliant/redis-src
src=$cache/redis-$upver

fetch_source() {
  mkdir -p "$cache"
  if [ -z "$(apt-cache showsrc redis 2>/dev/null | sed -n 's/^Version: //p')" ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "$me: no deb-src entry for Debian's archive: add one (or run as root), or unpack" \
        "Redis $upver's source in $src" >&2
      exit 1
    fi
    # Debian's own entries again, as deb-src, in a file of our own.
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        > /etc/apt/sources.list.d/pliant-deb-src.sources
    else
      grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' \
        > /etc/apt/sources.list.d/pliant-deb-src.list
    fi
    apt-get update -qq
  fi
  local dl
  dl=$(mktemp -d "$cache/dl.XXXXXX")
  # The installed version's own source; else whatever Debian now serves of the same upstream
  # version (a later security revision: the tests are Redis's, the patches Debian's).
  if ! (cd "$dl" && { apt-get source -qq --download-only "redis=$debver" \
    || apt-get source -qq --download-only redis; }) >"$dl/apt.log" 2>&1; then
    echo "$me: apt-get source redis failed: $(tail -n 3 "$dl/apt.log")" >&2
    exit 1
  fi
  if ! (cd "$dl" && dpkg-source -x ./*.dsc unpacked) >"$dl/unpack.log" 2>&1; then
    echo "$me: dpkg-source -x failed: $(tail -n 3 "$dl/unpack.log")" >&2
    exit 1
  fi
  if [ ! -x "$dl/unpacked/runtest" ] || ! grep -q "REDIS_VERSION \"$upver\"" "$dl/unpacked/src/version.h"; then
    echo "$me: Debian's redis source is not Redis $upver (installed: $debver);" \
      "unpack Redis $upver's source in $src instead" >&2
    exit 1
  fi
  mv "$dl/unpacked" "$src"
  rm -rf "$dl"
}
[ -x "$src/runtest" ] || fetch_source

# Two changes to the harness in the cached copy, both idempotent:
# - external mode runs FUNCTION FLUSH before every server block (Redis 7's functions: Lua
#   libraries, outside a cache's scope); an unknown command there would abort the whole unit, so
#   it may fail. Tests that use FUNCTION themselves still run, and fail.
# - src/redis-server, which spawned mode (auth) starts per server block, becomes a shim that
#   runs `pliant serve` on the port and with the requirepass of the config file the harness wrote.
#   The harness waits for " PID: <pid>" and "Ready to accept" on its stdout, pings, and stops it
#   by that pid: the shim prints both and execs the node, which keeps the pid.
sed -i 's/^    r function flush$/    catch {r function flush}/' "$src/tests/support/server.tcl"
grep -q '^    catch {r function flush}$' "$src/tests/support/server.tcl" || {
  echo "$me: $src/tests/support/server.tcl: the FUNCTION FLUSH line changed; update this script" >&2
  exit 1
}

if [ -z "$bin" ]; then
  cargo build --release --locked -q
  bin=$(pwd)/target/release/pliant
fi
[ -x "$bin" ] || { echo "$me: $bin is not an executable" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pliant-redis-suite.XXXXXX")
source tools/lib/node.sh
cleanup() { stop_node; rm -rf "$tmp"; }
trap cleanup EXIT
[ -z "$logs" ] || mkdir -p "$logs"

cat > "$src/src/redis-server" <<EOF
#!/usr/bin/env bash
# Written by Pliant's tools/compat/redis_suite.sh: Redis's test harness starts this per server block.
conf=\$1
port=\$(awk '\$1 == "port" { print \$2 }' "\$conf")
pass=\$(awk '\$1 == "requirepass" { print \$2 }' "\$conf")
args=(serve --bind "127.0.0.1:\$port" --no-store)
[ -z "\$pass" ] || args+=(--requirepass "\$pass")
echo "pliant shim PID: \$\$"
echo "Ready to accept connections"
exec "$bin" "\${args[@]}"
EOF
chmod +x "$src/src/redis-server"

# One unit: a fresh node (external mode) or none (auth: the harness spawns the shim). Writes
# $tmp/<unit>.out (runtest's output), $tmp/<unit>.status (ok, timeout SECONDS, node-exited) and
# $tmp/<unit>.hung (tests that hung). A test that makes no progress for 60 s stops the harness
# (its --timeout), which would lose the tests after it: the unit then runs again without the
# tests that hung, at most three times, and they count as failures.
run_unit() {
  local u=$1 f=${1//\//_} status rc attempt hung=() start=$SECONDS
  : > "$tmp/$f.hung"
  for attempt in 1 2 3 4; do
    local mode=(--host 127.0.0.1) skip=() t
    status=ok rc=0
    for t in "${hung[@]}"; do skip+=(--skiptest "$t"); done
    if [ "$u" = auth ]; then
      # Every block of auth.tcl is external:skip: it needs servers started with and without a
      # password, which only spawned mode gives (on ports the harness finds free at run time).
      mode=(--clients 1)
    else
      start_node "$bin" "$tmp/$f.node.log" --no-store
      mode+=(--port "$node_port")
    fi
    (cd "$src" && TERM=dumb timeout -k 10 "$unit_timeout" ./runtest "${mode[@]}" --singledb \
      --durable --timeout 60 --single "unit/$u" --tags "$tags" "${skip[@]}" \
      </dev/null >"$tmp/$f.out" 2>&1) || rc=$?
    [ "$rc" != 124 ] && [ "$rc" != 137 ] || status="timeout $unit_timeout"
    if [ -n "${node_pid:-}" ] && ! kill -0 "$node_pid" 2>/dev/null; then
      status=node-exited
    fi
    stop_node
    t=$(sed -n 's/^[^ ]* => (IN PROGRESS) //p' "$tmp/$f.out" | head -n 1)
    if [ "$attempt" = 4 ] || ! grep -q '^\[TIMEOUT\]' "$tmp/$f.out" || [ -z "$t" ]; then
      break
    fi
    echo "$me: unit/$u: '$t' hung; running the unit again without it" >&2
    hung+=("$t")
    echo "$t" >> "$tmp/$f.hung"
  done
  echo "$status" > "$tmp/$f.status"
  echo $((SECONDS - start)) > "$tmp/$f.secs"
  if [ -n "$logs" ]; then
    cp "$tmp/$f.out" "$logs/$f.out"
    [ ! -f "$tmp/$f.node.log" ] || cp "$tmp/$f.node.log" "$logs/$f.node.log"
  fi
}

for u in "${units[@]}"; do
  echo "$me: unit/$u" >&2
  run_unit "$u"
done

floors=$(for u in "${units[@]}"; do echo "$u ${floor[$u]}"; done)
python3 - "$tmp" "$upver" "$debver" "$json" "$markdown" "$floors" "${units[@]}" <<'PY'
import json, re, sys
from collections import defaultdict

tmp, upver, debver, json_path, markdown, floors, *units = sys.argv[1:]
floor = {u: int(n) for u, n in (l.split() for l in floors.splitlines())}
STATUS = re.compile(r"^\[(ok|err|ignore|skip|exception|ready|TIMEOUT|\d+/\d+ done)\]: ?(.*)$")
IGNORE = re.compile(r"^(?:(.*): )?(Tag: \S+ denied|Not supported on [^:]+|Tag: none of the tags allowed)$")
UNKNOWN = re.compile(r"unknown command '([^']+)'")
CONFIG = re.compile(r"argument '([^']+)'\) - unknown or immutable parameter")

def reason_of(lines):
    # --durable reports an error other than an assertion as its message less 10 characters, then
    # Tcl's errorInfo, whose first line is the whole message.
    lines = [l for l in lines if l.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and lines[1].endswith(lines[0]):
        text = lines[1]
    else:
        text = " ".join(l.strip() for l in lines)
        text = text.split(" (context: ")[0]
    text = " ".join(text.split())
    return text if len(text) <= 240 else text[:237] + "..."

def classify(reason):
    # A test whose assertion fails between MULTI and EXEC leaves the shared connection inside
    # MULTI; the tests after it on that connection fail with these, whatever they test.
    if "MULTI calls can not be nested" in reason or "WATCH inside MULTI is not allowed" in reason:
        return "follows an earlier failure", None
    m = UNKNOWN.search(reason)
    if m:
        return "not implemented", m.group(1).upper()
    m = CONFIG.search(reason)
    if m:
        return "not implemented", f"CONFIG SET {m.group(1)}"
    return "differs", None

results = []
for u in units:
    f = u.replace("/", "_")
    # No colours under TERM=dumb; stripped anyway, in case a terminal type asks for them.
    out = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{tmp}/{f}.out", errors="replace").read()).splitlines()
    status = open(f"{tmp}/{f}.status").read().strip()
    r = {"unit": u, "status": status, "seconds": int(open(f"{tmp}/{f}.secs").read()),
         "passed": 0, "failed": 0, "floor": floor[u],
         "excluded": [], "failures": [], "crash": None}
    i = 0
    while i < len(out):
        line = out[i]
        # The harness repeats every failure after the run: stop before that.
        if line.startswith("!!! WARNING") or line.startswith("*** [err]"):
            break
        m = STATUS.match(line)
        i += 1
        if not m:
            continue
        kind, data = m.groups()
        if kind == "ok":
            r["passed"] += 1
        elif kind == "err":
            detail = []
            while i < len(out) and not STATUS.match(out[i]) and not out[i].startswith(("!!! WARNING", "*** [err]")):
                detail.append(out[i])
                i += 1
            name = re.sub(r" in tests/unit/\S+\.tcl$", "", data)
            reason = reason_of(detail)
            cls, cmd = classify(reason)
            r["failed"] += 1
            r["failures"].append({"test": name, "reason": reason, "class": cls, "command": cmd})
        elif kind == "ignore":
            im = IGNORE.match(data)
            test, why = (im.group(1), im.group(2)) if im else (None, data)
            r["excluded"].append({"test": test, "why": why})
        elif kind == "exception":
            detail = [data]
            while i < len(out) and len(detail) < 3 and out[i].strip():
                detail.append(out[i].strip())
                i += 1
            r["crash"] = " ".join(detail)[:300]
    hung = open(f"{tmp}/{f}.hung").read().splitlines()
    if hung and status == "ok":
        r["status"] = f"ok, run again without the {len(hung)} test(s) that hung"
    for name in hung:
        r["failed"] += 1
        r["failures"].append({"test": name, "class": "differs", "command": None,
                              "reason": "hung: no reply and no progress for 60 s (runtest --timeout)"})
    if any(l.startswith("[TIMEOUT]") for l in out):
        r["status"] = "harness timed out"
    if r["crash"]:
        r["status"] = "harness aborted"
    results.append(r)

below = [r for r in results if r["passed"] < r["floor"]]
for r in results:
    r["below_floor"] = r in below

print(f"{'unit':14} {'passed':>6} {'failed':>6} {'excluded':>8} {'floor':>5} {'s':>4}  status", file=sys.stderr)
for r in results:
    note = r["status"] + (f": {r['crash']}" if r["crash"] else "")
    print(f"{r['unit']:14} {r['passed']:>6} {r['failed']:>6} {len(r['excluded']):>8} {r['floor']:>5} {r['seconds']:>4}  {note}"
          + ("  BELOW FLOOR" if r["below_floor"] else ""), file=sys.stderr)
    for x in r["failures"]:
        print(f"    [{x['class']}] {x['test']}: {x['reason']}", file=sys.stderr)

if json_path:
    with open(json_path, "w") as fh:
        json.dump({"redis_version": upver, "debian_version": debver, "units": results}, fh, indent=1)

if markdown == "1":
    print("| unit | passed | failed | excluded by tag or mode | seconds | harness |")
    print("|---|---:|---:|---:|---:|---|")
    for r in results:
        print(f"| {r['unit']} | {r['passed']} | {r['failed']} | {len(r['excluded'])} | {r['seconds']} | "
              f"{r['status']}{': ' + r['crash'] if r['crash'] else ''} |")
    tot = lambda k: sum(r[k] for r in results)
    print(f"| all | {tot('passed')} | {tot('failed')} | {sum(len(r['excluded']) for r in results)} | "
          f"{tot('seconds')} | |")
    print()
    print("Not implemented (the command a failing test needed first, and its tests per unit):")
    print()
    by_cmd = defaultdict(lambda: defaultdict(int))
    for r in results:
        for x in r["failures"]:
            if x["class"] == "not implemented":
                by_cmd[x["command"]][r["unit"]] += 1
    for cmd in sorted(by_cmd, key=lambda c: (-sum(by_cmd[c].values()), c)):
        per = ", ".join(f"{u} {n}" for u, n in by_cmd[cmd].items())
        print(f"- `{cmd}`: {sum(by_cmd[cmd].values())} ({per})")
    print()
    print("Differs from Redis (unit, test: what the harness reported):")
    print()
    for r in results:
        for x in r["failures"]:
            if x["class"] == "differs":
                reason = x["reason"].replace("|", "\\|")
                print(f"- {r['unit']}, *{x['test']}*: {reason}")
    print()
    cascade = [(r["unit"], x["test"]) for r in results for x in r["failures"]
               if x["class"] == "follows an earlier failure"]
    if cascade:
        print("Follow an earlier failure (the connection was left inside MULTI by a failed test before them):")
        print()
        for u, t in cascade:
            print(f"- {u}, *{t}*")
        print()
    print("Excluded, per unit (by the tags above, or by the run mode: `external:skip`, `singledb:skip`;")
    print("a *block* is a whole server block of tests, counted once):")
    print()
    tag = {"Not supported on external server": "external:skip", "Not supported on singledb": "singledb:skip"}
    for r in results:
        why = defaultdict(int)
        for x in r["excluded"]:
            w = x["why"]
            w = tag.get(w) or (w[5:-7] if w.startswith("Tag: ") and w.endswith(" denied") else w)
            why[f"`{w}`" + ("" if x["test"] else " block")] += 1
        if why:
            print(f"- {r['unit']}: " + ", ".join(f"{w} {n}" for w, n in sorted(why.items())))

passed = sum(r["passed"] for r in results)
ran = passed + sum(r["failed"] for r in results)
if below:
    for r in below:
        print(f"redis_suite.sh: unit/{r['unit']} passed {r['passed']} tests, below its floor of {r['floor']}"
              + (f" ({r['crash'] or r['status']})" if r['status'] != 'ok' else ""), file=sys.stderr)
    sys.exit(1)
print(f"redis_suite.sh: {passed} of {ran} tests pass in {len(results)} units, every unit at or above its floor",
      file=sys.stderr)
PY
