#!/usr/bin/env python3
"""The driver of tools/bench/balancer.sh (see its header for what is measured and how to read
it). Needs redis-py (`redis.cluster.RedisCluster`); run with target/compat-venv/bin/python.

Two steps, so that the summary can count the cluster's stop among its checks:

  run     given a running `pliant cluster up --json --balancer ...` (its first stdout line in
          --up), picks the hot keys (their slot owned by node 0 at start) and the others, runs
          the skewed load for --duration seconds while sampling `pliant cluster status --json
          --window 1s` back to back (the timeline), then reads every node's `PLIANT.BALANCER LOG
          1000`, stops the load, reads every key back through RedisCluster against the last
          acknowledged value, reads the logs once more, and writes all of it (raw) to --out;
  report  after the wrapper stopped the cluster (--stop: a file naming what did not stop
          cleanly, empty if nothing), computes the start and end balance, the moves and the
          checks from --run, prints the markdown summary, writes --json, exits 1 unless PASS.
"""

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

from redis import Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

SLOTS = 16384
HOT_SHARE = 0.9  # of the SETs, to hot keys
END_WINDOW = 10.0  # seconds of samples the end balance is the mean of
MAX_RATIO = 1.25  # max/mean of the nodes' ops/s at the end, at most

T0 = time.monotonic()


def log(msg):
    print(f"balancer [{time.monotonic() - T0:6.1f}s]: {msg}", file=sys.stderr, flush=True)


def parse_interval(s):
    """Seconds of a --balancer-interval: 2s, 500ms, or plain seconds."""
    if s.endswith("ms"):
        return float(s[:-2]) / 1000
    if s.endswith("s"):
        return float(s[:-1])
    return float(s)


def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


# ---------------------------------------------------------------------------------------------
# Keys and the load

def pick_keys(ranges, n_hot, n_other):
    """n_hot keys whose slot is in `ranges` (node 0's at start) and n_other keys whose slot is
    not: the first ones of bal:0, bal:1, ..."""
    owned = bytearray(SLOTS)
    for a, b in ranges:
        owned[a:b + 1] = b"\x01" * (b + 1 - a)
    hot, other = [], []
    i = 0
    while len(hot) < n_hot or len(other) < n_other:
        k = f"bal:{i}"
        i += 1
        if owned[key_slot(k.encode())]:
            if len(hot) < n_hot:
                hot.append(k)
        elif len(other) < n_other:
            other.append(k)
        if i > 1000 * (n_hot + n_other):
            raise RuntimeError(f"node 0 owns too few or too many slots to pick keys ({ranges})")
    return hot, other


class Load:
    """What the writer threads share. Each key has one writer, so a dict item assignment (atomic
    under the GIL) is all a key's state needs."""

    def __init__(self, writers):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked = {}  # key -> last acknowledged value
        self.doubt = {}  # key -> values whose SET raised, sent after the last acknowledged one
        self.writes = [0] * writers  # acknowledged SETs per writer
        self.hot_writes = [0] * writers
        self.error_count = 0
        self.error_types = {}
        self.errors = []  # the first few, in detail
        self.moved = 0  # MOVED answers redis-py followed
        self.refreshes = 0  # topology re-reads by redis-py
        self.thread_failures = []

    def client_error(self, thread, key, e, t):
        with self.lock:
            self.error_count += 1
            name = type(e).__name__
            self.error_types[name] = self.error_types.get(name, 0) + 1
            if len(self.errors) < 30:
                where = [f"{f.name}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)[-3:]]
                self.errors.append({"t": round(t, 3), "thread": thread, "key": key,
                                    "error": f"{name}: {e}", "where": where})


def make_client(load, startup, timeout):
    rc = RedisCluster(startup_nodes=[ClusterNode(h, int(p)) for h, p in startup],
                      decode_responses=True, socket_timeout=timeout,
                      socket_connect_timeout=timeout)
    if load is None:
        return rc
    nm = rc.nodes_manager
    init, moved = nm.initialize, nm.update_moved_exception

    def counted_init(*a, **kw):
        with load.lock:
            load.refreshes += 1
        return init(*a, **kw)

    def counted_moved(*a, **kw):
        with load.lock:
            load.moved += 1
        return moved(*a, **kw)

    nm.initialize, nm.update_moved_exception = counted_init, counted_moved
    return rc


class Pacer:
    """At most `rate` operations a second (0: no limit)."""

    def __init__(self, rate):
        self.gap = 1.0 / rate if rate > 0 else 0.0
        self.next = time.monotonic()

    def wait(self, stop):
        if not self.gap:
            return
        self.next += self.gap
        d = self.next - time.monotonic()
        if d > 0:
            stop.wait(d)
        elif d < -1.0:  # fell behind (a slow call): do not burst to catch up
            self.next = time.monotonic()


def writer(load, w, hot, other, startup, rate, seed, timeout, deadline, t_load0):
    name = f"writer-{w}"
    try:
        rnd = random.Random(seed * 1000 + w)
        rc = make_client(load, startup, timeout)
        pacer = Pacer(rate)
        n = 0
        try:
            while not load.stop.is_set() and time.monotonic() < deadline:
                pacer.wait(load.stop)
                is_hot = not other or rnd.random() < HOT_SHARE
                k = rnd.choice(hot if is_hot else other)
                n += 1
                v = f"{w}:{n}"
                try:
                    ok = rc.set(k, v)
                    if ok is not True:
                        raise RuntimeError(f"SET answered {ok!r}")
                except Exception as e:
                    load.client_error(name, k, e, time.monotonic() - t_load0)
                    load.doubt.setdefault(k, []).append(v)
                    continue
                load.acked[k] = v
                load.doubt.pop(k, None)
                load.writes[w] += 1
                load.hot_writes[w] += is_hot
        finally:
            rc.close()
    except Exception as e:  # a bug of the driver (or no client at all), not a client error
        with load.lock:
            load.thread_failures.append(f"{name}: {type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------------------
# The nodes

def node_call(addr, *args, timeout=10):
    host, port = addr.rsplit(":", 1)
    r = Redis(host, int(port), decode_responses=True, socket_timeout=timeout,
              socket_connect_timeout=timeout)
    try:
        return r.execute_command(*args)
    finally:
        r.close()


def balancer_log(addr, n):
    text = node_call(addr, "PLIANT.BALANCER", "LOG", n)
    return [json.loads(line) for line in (text or "").splitlines() if line.strip()]


def balancer_logs(addrs, n, failures, when):
    out = {}
    for i, addr in enumerate(addrs):
        try:
            out[str(i)] = balancer_log(addr, n)
        except Exception as e:
            failures.append(f"{when}: PLIANT.BALANCER LOG {n} of node {i} ({addr}): "
                            f"{type(e).__name__}: {e}")
    return out


def balancer_statuses(addrs):
    out = {}
    for i, addr in enumerate(addrs):
        try:
            out[str(i)] = json.loads(node_call(addr, "PLIANT.BALANCER", "STATUS"))
        except Exception as e:
            out[str(i)] = {"error": f"{type(e).__name__}: {e}"}
    return out


class Status:
    """`pliant cluster status ADDR --json`, ADDR the first node that answers (the last one that
    did first)."""

    def __init__(self, binary, addrs):
        self.bin = binary
        self.addrs = list(addrs)
        self.errors = []

    def __call__(self, window="1s", timeout=30):
        why = []
        for addr in list(self.addrs):
            cmd = [self.bin, "cluster", "status", addr, "--json", "--window", window]
            try:
                p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                   timeout=timeout)  # on timeout: killed by its pid, reaped
            except subprocess.TimeoutExpired:
                why.append(f"{addr}: no answer within {timeout} s")
                continue
            if p.returncode == 0:
                try:
                    st = json.loads(p.stdout)
                except ValueError as e:
                    why.append(f"{addr}: no JSON ({e}): {p.stdout[-300:]}")
                    continue
                if addr != self.addrs[0]:
                    self.addrs.remove(addr)
                    self.addrs.insert(0, addr)
                return st
            why.append(f"{addr}: exit status {p.returncode}: {p.stderr.strip()[-300:]}")
        self.errors.append({"t": round(time.monotonic() - T0, 3), "why": why})
        return None


def move_line(i, e, m, idx_of, t):
    return (f"move at t={t:.1f}s: node {i} → node {idx_of.get(m['to'], m['to'])}: {m['slots']} "
            f"slots ({m['load']:.0f} of {m['asked']:.0f} ops/s asked, {m['strategy']}), "
            f"{m['keys']} keys in {m['seconds']:.2f} s; loads "
            + "/".join(f"{e['loads'][nid]:.0f}" for nid in sorted(e["loads"], key=lambda x: idx_of.get(x, 99))))


# ---------------------------------------------------------------------------------------------
# run

def run(a):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(a.up) as f:
        up = json.loads(f.readline())
    nodes = [{"index": i, "id": n["id"], "addr": n["addr"], "slots": n["slots"]}
             for i, n in enumerate(up["nodes"])]
    addrs = [n["addr"] for n in nodes]
    idx_of = {n["id"]: n["index"] for n in nodes}
    startup = [tuple(ad.rsplit(":", 1)) for ad in addrs]
    failures = []
    out = {"params": {"nodes": len(nodes), "duration": a.duration, "interval": a.interval,
                      "interval_s": parse_interval(a.interval), "writers": a.writers,
                      "rate": a.rate, "hot_keys": a.hot_keys, "other_keys": a.other_keys,
                      "seed": a.seed, "policy": a.policy, "balancer_params": a.param,
                      "slot_window": a.slot_window,  # None: not given, the server's default
                      "hot_share_of_sets": HOT_SHARE},
           "up": {"coord": up.get("coord"), "pids": up.get("pids"), "nodes": nodes},
           "failures": failures}
    hot, other = pick_keys(nodes[0]["slots"], a.hot_keys, a.other_keys)
    out["keys"] = {"hot": len(hot), "other": len(other),
                   "other_per_node": {str(i): sum(1 for k in other if owner(nodes, k) == i)
                                      for i in range(1, len(nodes))}}
    listed = ", ".join(f"{n['index']}: {n['addr']}" for n in nodes)
    pace = "as fast as they go" if not a.rate else f"{a.rate} ops/s each"
    log(f"{len(nodes)} nodes up ({listed}); {len(hot)} hot keys (node 0), {len(other)} "
        f"others; load for {a.duration} s, {a.writers} writers, {pace}")

    # The load.
    load = Load(a.writers)
    t_load0 = time.monotonic()
    out["load_start_unix_ms"] = int(time.time() * 1000)
    deadline = t_load0 + a.duration
    threads = []
    for w in range(a.writers):
        t = threading.Thread(target=writer, name=f"writer-{w}",
                             args=(load, w, hot[w::a.writers], other[w::a.writers], startup,
                                   a.rate, a.seed, 10.0, deadline + 5, t_load0), daemon=True)
        t.start()
        threads.append(t)

    # The timeline, while the load runs.
    status = Status(a.bin, addrs)
    timeline = []
    out["timeline"] = timeline
    seen_moves = set()
    next_progress = 5.0

    def poll_moves(n):
        for i, addr in enumerate(addrs):
            try:
                entries = balancer_log(addr, n)
            except Exception as e:
                log(f"PLIANT.BALANCER LOG of node {i}: {type(e).__name__}: {e}")
                continue
            for e in entries:
                key = (i, e["unix_ms"])
                if key in seen_moves or not (e["moved"] or e["error"]):
                    continue
                seen_moves.add(key)
                t = (e["unix_ms"] - out["load_start_unix_ms"]) / 1000
                for m in e["moved"]:
                    log(move_line(i, e, m, idx_of, t))
                if e["error"]:
                    log(f"balancer error on node {i} at t={t:.1f}s: {e['error']}")

    try:
        while not load.thread_failures:
            now = time.monotonic()
            if deadline - now < 1.5:  # a sample would end after the load
                time.sleep(max(0.0, deadline - now))
                break
            t_a = now - t_load0
            st = status("1s")
            t_b = time.monotonic() - t_load0
            if st is not None:
                per = []
                for n in st["nodes"]:
                    if n["id"] not in idx_of:  # a node that was not there at start
                        idx_of[n["id"]] = len(idx_of)
                    per.append({"i": idx_of[n["id"]], "ops": n.get("ops_per_s"),
                                "slots": n["slots"], "keys": n.get("keys"),
                                "alive": n.get("alive"), "reachable": n.get("reachable")})
                per.sort(key=lambda x: x["i"])
                timeline.append({"t": round((t_a + t_b) / 2, 3), "t_end": round(t_b, 3),
                                 "version": st["version"],
                                 "slots_migrating": st["slots_migrating"], "nodes": per})
            if t_b >= next_progress:
                next_progress = t_b - t_b % 5 + 5
                if timeline:
                    s = timeline[-1]
                    ops = [x["ops"] for x in s["nodes"] if x["ops"] is not None]
                    mean = sum(ops) / len(ops) if ops else 0
                    log(f"t={t_b:5.1f}s: ops/s "
                        + "/".join(fmt(x["ops"], ".0f") for x in s["nodes"])
                        + ", slots " + "/".join(str(x["slots"]) for x in s["nodes"])
                        + (f", max/mean {max(ops) / mean:.2f}" if mean > 0 else "")
                        + f"; writes {sum(load.writes):,}, client errors {load.error_count}"
                        + ("" if st is not None else "; (this sample failed)"))
                poll_moves(50)
    finally:
        # Every node's decisions at the end of the load, the load still running.
        out["logs_at_end"] = balancer_logs(addrs, 1000, failures, "at the end of the load")
        load.stop.set()
        out["load_stop_unix_ms"] = int(time.time() * 1000)
        for t in threads:
            t.join(timeout=30)
            if t.is_alive():
                failures.append(f"load thread {t.name} did not stop within 30 s")
    poll_moves(50)
    for tf in load.thread_failures:
        failures.append(f"load thread failed: {tf}")
    out["status_failures"] = status.errors
    log(f"load stopped: {sum(load.writes):,} acknowledged writes, {load.error_count} client "
        f"errors, {len(timeline)} status samples ({len(status.errors)} failed)")

    # Every key read back.
    rb = {"ok": 0, "never_written": 0, "missing": [], "lost": [], "wrong": [], "in_doubt": [],
          "unexpected": []}
    keys = hot + other
    got = {}
    rc = make_client(None, startup, 10.0)
    try:
        for s in range(0, len(keys), 500):
            chunk = keys[s:s + 500]
            got.update(zip(chunk, rc.mget_nonatomic(chunk)))
    except Exception as e:
        failures.append(f"reading every key back through the cluster failed: "
                        f"{type(e).__name__}: {e}")
        got = None
    finally:
        rc.close()
    if got is not None:
        for k in keys:
            want, v, doubt = load.acked.get(k), got.get(k), load.doubt.get(k, [])
            if v == want:
                rb["ok" if want is not None else "never_written"] += 1
            elif v is not None and v in doubt:
                rb["in_doubt"].append({"key": k, "read": v, "last_acked": want})
            elif want is None:
                rb["unexpected"].append({"key": k, "read": v})
            elif v is None:
                rb["missing"].append({"key": k, "last_acked": want})
            else:
                w_r, _, n_r = v.partition(":")
                w_a, _, n_a = want.partition(":")
                older = w_r == w_a and n_r.isdigit() and int(n_r) < int(n_a)
                rb["lost" if older else "wrong"].append({"key": k, "read": v, "last_acked": want})
    out["readback"] = {"done": got is not None, "keys": len(keys),
                       "written": len(load.acked),
                       "ok": rb["ok"], "never_written": rb["never_written"],
                       **{k: len(rb[k]) for k in ("missing", "lost", "wrong", "in_doubt",
                                                  "unexpected")},
                       "examples": {k: rb[k][:10] for k in ("missing", "lost", "wrong",
                                                            "in_doubt", "unexpected") if rb[k]}}
    log(f"read back {len(keys)} keys: {rb['ok']} as last acknowledged, "
        f"{rb['never_written']} never written, missing {len(rb['missing'])}, lost "
        f"{len(rb['lost'])}, wrong {len(rb['wrong'])}, in doubt {len(rb['in_doubt'])}")

    # The logs again (a move after the load stopped shows), the balancers' counts, the map.
    out["logs"] = balancer_logs(addrs, 1000, failures, "after the read-back")
    out["balancer_status"] = balancer_statuses(addrs)
    st = status("200ms")
    if st is not None:
        out["final_status"] = {
            "version": st["version"], "slots_assigned": st["slots_assigned"],
            "slots_migrating": st["slots_migrating"],
            "nodes": sorted(({"i": idx_of.get(n["id"]), "id": n["id"], "slots": n["slots"],
                              "keys": n.get("keys"), "memory_bytes": n.get("memory_bytes")}
                             for n in st["nodes"]), key=lambda x: x["i"])}
    else:
        failures.append("no `pliant cluster status` after the read-back")
    out["client"] = {"writes": sum(load.writes), "writes_per_writer": load.writes,
                     "hot_writes": sum(load.hot_writes), "errors": load.error_count,
                     "error_types": load.error_types, "error_examples": load.errors,
                     "moved": load.moved, "topology_refreshes": load.refreshes,
                     "keys_in_doubt": sum(1 for v in load.doubt.values() if v)}
    out["run_seconds"] = round(time.monotonic() - T0, 1)
    with open(a.out, "w") as f:
        json.dump(out, f)
    return 0


def owner(nodes, key):
    s = key_slot(key.encode())
    for n in nodes:
        if any(a <= s <= b for a, b in n["slots"]):
            return n["index"]
    return None


# ---------------------------------------------------------------------------------------------
# report

def ratio_share(loads, hot=0):
    """max/mean over the nodes, and node `hot`'s share of the total."""
    vals = [v for v in loads.values() if v is not None]
    total = sum(vals)
    if not vals or total <= 0:
        return None, None
    return max(vals) / (total / len(vals)), (loads.get(hot) or 0) / total


def analyse(r, stop_problems):
    p = r["params"]
    nodes = r["up"]["nodes"]
    n_nodes = len(nodes)
    idx_of = {n["id"]: n["index"] for n in nodes}
    hot_id = nodes[0]["id"]
    t0 = r["load_start_unix_ms"]
    dur = float(p["duration"])
    interval = p["interval_s"]
    logs = r.get("logs") or r.get("logs_at_end") or {}
    failures = list(r["failures"])
    a = {}

    # Decisions, by node, with the time since the load started.
    dec = []
    for i, entries in logs.items():
        prev = None
        for e in entries:
            t = (e["unix_ms"] - t0) / 1000
            dec.append({"node": int(i), "t": t, "prev_t": prev, "e": e})
            prev = t
    dec.sort(key=lambda d: d["t"])
    a["log_truncated"] = [i for i, entries in logs.items() if len(entries) >= 1000]
    per_node = {}
    for i in range(n_nodes):
        mine = [d["e"] for d in dec if d["node"] == i]
        per_node[i] = {"decisions": sum(1 for e in mine if e["skipped"] is None),
                       "skipped": sum(1 for e in mine if e["skipped"] is not None),
                       "whens": sum(1 for e in mine if e["when"]),
                       "moves": sum(len(e["moved"]) for e in mine),
                       "errors": sum(1 for e in mine if e["error"]),
                       "skip_reasons": sorted({re.sub(r"\d+", "N", e["skipped"].split(":")[0])
                                               for e in mine if e["skipped"]})[:5]}
    a["per_node"] = per_node
    a["balancer_errors"] = [{"node": d["node"], "t": round(d["t"], 2), "error": d["e"]["error"]}
                            for d in dec if d["e"]["error"]]

    def loads_by_index(e):
        return {idx_of.get(k, k): v for k, v in e["loads"].items()}

    # Start: the first decision whose measuring interval was all under load (the same node's
    # previous entry came after the load started).
    start = next((d for d in dec if d["e"]["skipped"] is None and d["e"]["loads"]
                  and sum(d["e"]["loads"].values()) > 0 and d["prev_t"] is not None
                  and d["prev_t"] >= 0), None)
    if start:
        lb = loads_by_index(start["e"])
        ratio, share = ratio_share(lb)
        a["start"] = {"t": round(start["t"], 2), "node": start["node"], "loads": lb,
                      "max_mean": ratio, "hot_share": share}
    # End, by the balancer's own measure: the last decision with loads during the load.
    last = next((d for d in reversed(dec) if d["e"]["skipped"] is None and d["e"]["loads"]
                 and sum(d["e"]["loads"].values()) > 0 and d["t"] <= dur), None)
    if last:
        lb = loads_by_index(last["e"])
        ratio, share = ratio_share(lb)
        a["end_balancer"] = {"t": round(last["t"], 2), "node": last["node"], "loads": lb,
                             "max_mean": ratio, "hot_share": share}
    # End, by the timeline: each node's mean ops/s over the samples of the last END_WINDOW s.
    tl = r["timeline"]
    tail = [s for s in tl if s["t_end"] >= dur - END_WINDOW]
    if tail:
        means = {}
        for i in range(n_nodes):
            xs = [x["ops"] for s in tail for x in s["nodes"] if x["i"] == i and x["ops"] is not None]
            means[i] = sum(xs) / len(xs) if xs else None
        ratio, share = ratio_share(means)
        a["end"] = {"samples": len(tail), "from_t": round(tail[0]["t"], 1),
                    "to_t": round(tail[-1]["t"], 1), "ops": means, "max_mean": ratio,
                    "hot_share": share,
                    "slots": {x["i"]: x["slots"] for x in tail[-1]["nodes"]}}
    # And the timeline's own start: the first sample under load.
    if tl:
        s = tl[0]
        ratio, share = ratio_share({x["i"]: x["ops"] for x in s["nodes"]})
        a["start_timeline"] = {"t": s["t"], "max_mean": ratio, "hot_share": share}

    # The moves.
    moves = []
    for d in dec:
        e, off = d["e"], 0.0
        for m in e["moved"]:
            moves.append({"t": round(d["t"] + off, 2),
                          "t_end": round(d["t"] + off + m["seconds"], 2),
                          "from": d["node"], "to": idx_of.get(m["to"], m["to"]),
                          "slots": m["slots"], "asked": m["asked"], "load": m["load"],
                          "keys": m["keys"], "bytes": m["bytes"], "seconds": m["seconds"],
                          "strategy": m["strategy"], "version": e["version"],
                          "loads": loads_by_index(e), "decision_unix_ms": e["unix_ms"],
                          "after_load": d["t"] > dur})
            off += m["seconds"]
    a["moves"] = moves
    # How well each move hit its target, by the mover's own log: its load at the deciding
    # decision, minus its load at its first later decision that was not skipped (that load is
    # measured from the move's end: the balancer reads every count again after a move), over
    # the load of the slots moved (every move of that decision: they share the value).
    by_node = {}
    for d in dec:
        by_node.setdefault(d["node"], []).append(d)
    for i, ds in by_node.items():
        me = nodes[i]["id"] if i < n_nodes else None
        for j, d in enumerate(ds):
            e = d["e"]
            if not e["moved"]:
                continue
            mine = [m for m in moves if m["from"] == i and m["decision_unix_ms"] == e["unix_ms"]]
            moved_load = sum(m["load"] for m in e["moved"])
            before = e["loads"].get(me)
            nxt = next((x for x in ds[j + 1:] if x["e"]["skipped"] is None
                        and me in x["e"]["loads"]), None)
            after = None if nxt is None else nxt["e"]["loads"][me]
            why = None
            if before is None:
                why = "no load of its own at the decision"
            elif nxt is None:
                why = "no later decision"
            elif nxt["t"] > dur:
                why = "next decision after the load ended"
            elif moved_load <= 0:
                why = "no load moved"
            ratio = None if why else (before - after) / moved_load
            for m in mine:
                m["mover_before"] = before
                m["mover_after"] = after
                m["after_t"] = None if nxt is None else round(nxt["t"], 2)
                m["realized_ratio"] = ratio
                m["realized_why"] = why
    ratios = sorted(m["realized_ratio"] for m in moves if m.get("realized_ratio") is not None)
    a["realized"] = {
        "moves": len(ratios),
        "median": (None if not ratios else ratios[len(ratios) // 2] if len(ratios) % 2
                   else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2),
        "min": ratios[0] if ratios else None, "max": ratios[-1] if ratios else None}
    last_end = max((m["t_end"] for m in moves), default=None)
    a["last_move_end"] = last_end
    a["quiet_s"] = None if last_end is None else max(0.0, dur - last_end)
    a["whens_after_last_move"] = sum(1 for d in dec if d["e"]["when"] and last_end is not None
                                     and d["t"] > last_end)

    # The ring of ids the spill goes round.
    ring = sorted(n["id"] for n in nodes)
    a["ring"] = [idx_of[x] for x in ring]

    # Checks.
    rb = r.get("readback", {})
    cl = r.get("client", {})
    bad_keys = sum(rb.get(k, 0) for k in ("missing", "lost", "wrong", "unexpected"))
    end = a.get("end", {})
    fs = r.get("final_status")
    keys_equal = None
    if fs is not None and rb.get("done") and not rb.get("in_doubt"):
        counted = [n["keys"] for n in fs["nodes"] if n["slots"] > 0]
        keys_equal = None not in counted and sum(counted) == rb.get("written")
        a["keys_counted"] = None if None in counted else sum(counted)
    third = dur * 2 / 3
    late = [m for m in moves if m["t_end"] >= third]
    checks = [
        ("at least one move", len(moves) >= 1, f"{len(moves)}"),
        (f"no move in the last third (after t={third:.0f}s)", not late and bool(moves),
         (f"last move ended at t={last_end:.1f}s" if moves else "no move")
         + (f"; {len(late)} late" if late else "")),
        (f"max/mean ops/s over the last {END_WINDOW:.0f} s < {MAX_RATIO}",
         end.get("max_mean") is not None and end["max_mean"] < MAX_RATIO,
         fmt(end.get("max_mean"), ".3f")),
        ("lost or wrong keys (missing / older / wrong / never acknowledged)",
         rb.get("done", False) and bad_keys == 0,
         (f"{bad_keys} ({rb.get('missing')} / {rb.get('lost')} / {rb.get('wrong')} / "
          f"{rb.get('unexpected')}) of {rb.get('written')} written") if rb.get("done")
         else "not read back"),
        ("client errors (not a redirect followed)", cl.get("errors", 1) == 0,
         f"{cl.get('errors')}" + (f" {cl.get('error_types')}" if cl.get("errors") else "")),
        ("failed balancer decisions", not a["balancer_errors"], f"{len(a['balancer_errors'])}"),
        ("keys counted by `cluster status` = keys written", keys_equal is not False,
         {True: f"{a.get('keys_counted')} = {rb.get('written')}", None: "not checked",
          False: f"**{a.get('keys_counted')} ≠ {rb.get('written')}**"}[keys_equal]),
        ("slots assigned / migrating at the end",
         fs is not None and fs["slots_assigned"] == SLOTS and fs["slots_migrating"] == 0,
         f"{fs['slots_assigned']} / {fs['slots_migrating']}" if fs else "no status"),
        ("cluster stopped by its pid, no node left", not stop_problems,
         "yes" if not stop_problems else "; ".join(stop_problems)),
        ("driver", not failures, "ok" if not failures else f"{len(failures)} failures"),
    ]
    a["checks"] = [{"check": c, "ok": bool(ok), "result": res} for c, ok, res in checks]
    a["pass"] = all(ok for _, ok, _ in checks)
    a["failures"] = failures + [f"cluster stop: {s}" for s in stop_problems]
    return a


def summary_md(r, a):
    p = r["params"]
    nodes = r["up"]["nodes"]
    n = len(nodes)
    dur = float(p["duration"])
    cl = r.get("client", {})
    lines = [f"## Mantle balancer on a skewed cluster: {'PASS' if a['pass'] else 'FAIL'}", ""]
    params = (" ".join(f"--balancer-param {x}" for x in p["balancer_params"])
              if p["balancer_params"] else "default parameters")
    pace = "as fast as they go" if not p["rate"] else f"{p['rate']} ops/s each"
    sw = p.get("slot_window")
    lines.append(
        f"`pliant cluster up --nodes {n} --balancer {p['policy']} --balancer-interval "
        f"{p['interval']}" + (f" -- --balancer-slot-window {sw}`" if sw else "`")
        + f" ({params}; slot window "
        + (f"{sw} interval{'s' if sw != 1 else ''}" if sw else "not given: the server's default") + f"); {p['duration']} s of load from {p['writers']} redis-py "
        f"RedisCluster writers ({pace}), "
        f"{int(p['hot_share_of_sets'] * 100)}% of SETs to {r['keys']['hot']} keys of node 0, "
        f"the rest to {r['keys']['other']} keys of the other nodes; {cl.get('writes', 0):,} "
        f"acknowledged SETs ({cl.get('writes', 0) / dur:,.0f}/s). Spill ring (next node by id): "
        + " → ".join(str(i) for i in a["ring"] + a["ring"][:1]) + ".")
    lines.append("")
    lines += ["| check | ok | result |", "|---|---|---|"]
    for c in a["checks"]:
        lines.append(f"| {c['check']} | {'yes' if c['ok'] else '**no**'} | {c['result']} |")
    lines.append("")
    st, eb, en, stl = a.get("start"), a.get("end_balancer"), a.get("end"), a.get("start_timeline")
    lines += ["| | node 0's share of the load | max/mean | loads (ops/s, node 0/1/…) |",
              "|---|---|---|---|"]

    def loads_of(d, key):
        return "/".join(fmt(d[key].get(i, d[key].get(str(i))), ".0f") for i in range(n))

    if st:
        lines.append(f"| start: first balancer decision over a full interval of load (node "
                     f"{st['node']}, t={st['t']:.1f}s) | {fmt(st['hot_share'] * 100, '.0f')}% | "
                     f"{fmt(st['max_mean'], '.2f')} | {loads_of(st, 'loads')} |")
    else:
        lines.append("| start: no balancer decision over a full interval of load | – | – | – |")
    if stl:
        lines.append(f"| start: first `cluster status` sample (t={stl['t']:.1f}s) | "
                     f"{fmt(None if stl['hot_share'] is None else stl['hot_share'] * 100, '.0f')}%"
                     f" | {fmt(stl['max_mean'], '.2f')} | {'/'.join(fmt(x['ops'], '.0f') for x in r['timeline'][0]['nodes'])} |")
    if en:
        lines.append(f"| end: mean of `cluster status` over t={en['from_t']:.0f}–"
                     f"{en['to_t']:.0f}s ({en['samples']} samples) | "
                     f"{fmt(None if en['hot_share'] is None else en['hot_share'] * 100, '.0f')}% | "
                     f"{fmt(en['max_mean'], '.2f')} | {loads_of(en, 'ops')} |")
    if eb:
        lines.append(f"| end: last balancer decision (node {eb['node']}, t={eb['t']:.1f}s) | "
                     f"{fmt(eb['hot_share'] * 100, '.0f')}% | {fmt(eb['max_mean'], '.2f')} | "
                     f"{loads_of(eb, 'loads')} |")
    lines.append("")
    moves = a["moves"]
    if moves:
        lines.append(
            f"{len(moves)} moves ({sum(m['slots'] for m in moves):,} slots, "
            f"{sum(m['keys'] for m in moves):,} keys); the first decided at t="
            f"{moves[0]['t']:.1f}s, the last ended at t={a['last_move_end']:.1f}s, then "
            f"{a['quiet_s']:.1f} s without a move until the load ended at t={dur:.0f}s"
            + (f" ({a['whens_after_last_move']} decisions after it still had `when` true but "
               f"moved nothing)" if a["whens_after_last_move"] else "") + ".")
    else:
        lines.append("No move.")
    rz = a.get("realized") or {}
    if moves:
        lines.append(
            "How well the moves hit their target, realized / moved (the mover's load at the "
            "deciding decision minus its load at its next decision, over the load of the slots "
            "moved; the mover's own log; 1 = its load fell by what was picked): "
            + (f"median **{rz['median']:.2f}** over {rz['moves']} moves (min {rz['min']:.2f}, "
               f"max {rz['max']:.2f})" if rz.get("moves") else "no move measured")
            + (f"; {len(moves) - rz.get('moves', 0)} not measured" if len(moves) > rz.get("moves", 0)
               else "") + ".")
    if en and en.get("slots"):
        lines.append("Slots at the end: " + ", ".join(
            f"node {i} {en['slots'].get(i, en['slots'].get(str(i)))}" for i in range(n)) + ".")
    lines.append("")
    lines += ["| node | decisions | skipped (why) | `when` true | moves out | errors |",
              "|---|---|---|---|---|---|"]
    for i in range(n):
        d = a["per_node"].get(i) or a["per_node"].get(str(i))
        why = "; ".join(d["skip_reasons"])
        lines.append(f"| {i} | {d['decisions']} | {d['skipped']}{f' ({why})' if why else ''} | "
                     f"{d['whens']} | {d['moves']} | {d['errors']} |")
    lines.append("")

    # Timeline, one row every ~5 s.
    lines.append("### Timeline (`pliant cluster status --window 1s`, about every 5 s)")
    lines.append("")
    head = "| t (s) | " + " | ".join(f"node {i} ops/s | slots" for i in range(n)) \
        + " | max/mean | node 0 share |"
    lines += [head, "|" + "---|" * (2 * n + 3)]
    tl = r["timeline"]
    used = set()
    for target in [x * 5.0 for x in range(int(dur // 5) + 1)]:
        best = min(range(len(tl)), key=lambda j: abs(tl[j]["t"] - target), default=None)
        if best is None or best in used or abs(tl[best]["t"] - target) > 2.5:
            continue
        used.add(best)
        s = tl[best]
        ratio, share = ratio_share({x["i"]: x["ops"] for x in s["nodes"]})
        cells = []
        for i in range(n):
            x = next((y for y in s["nodes"] if y["i"] == i), None)
            cells += [fmt(x and x["ops"], ".0f"), str(x["slots"]) if x else "–"]
        lines.append(f"| {s['t']:.1f} | " + " | ".join(cells)
                     + f" | {fmt(ratio, '.2f')} | {fmt(None if share is None else share * 100, '.0f')}% |")
    lines.append("")

    lines.append("### Moves (from every node's `PLIANT.BALANCER LOG`)")
    lines.append("")
    if moves:
        lines += ["| t (s) | from | to | slots | asked ops/s | moved ops/s | keys | seconds | "
                  "strategy | loads when decided (node 0/1/…) | mover's load: decided → next "
                  "(t) | realized / moved |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for m in moves:
            nxt = (f"{fmt(m.get('mover_before'), '.0f')} → {fmt(m.get('mover_after'), '.0f')}"
                   + (f" ({m['after_t']:.1f})" if m.get("after_t") is not None else ""))
            rr = (fmt(m.get("realized_ratio"), ".2f") if m.get("realized_ratio") is not None
                  else f"– ({m.get('realized_why') or 'not measured'})")
            lines.append(
                f"| {m['t']:.1f}{' (after the load)' if m['after_load'] else ''} | {m['from']} | "
                f"{m['to']} | {m['slots']} | {m['asked']:.0f} | {m['load']:.0f} | {m['keys']} | "
                f"{m['seconds']:.2f} | {m['strategy']} | "
                + "/".join(fmt(m["loads"].get(i), ".0f") for i in range(n))
                + f" | {nxt} | {rr} |")
    else:
        lines.append("(none)")
    lines.append("")
    lines.append(
        f"Client: {cl.get('writes', 0):,} acknowledged SETs, {cl.get('errors', 0)} errors, "
        f"{cl.get('moved', 0):,} MOVED followed and {cl.get('topology_refreshes', 0):,} topology "
        f"re-reads by redis-py. Start and the last decision: the balancer's loads (keyed "
        f"commands/s over its interval); the timeline and its end: `cluster status` ops/s over "
        f"1 s (every command). t: seconds since the load started; a move's t is its decision.")
    if a.get("log_truncated"):
        lines.append(f"Note: the logs of nodes {a['log_truncated']} hold 1,000 decisions, the "
                     f"most `PLIANT.BALANCER LOG` keeps: earlier ones are not counted.")
    if a["failures"]:
        lines.append("")
        lines.append("Failures:")
        for f in a["failures"][:20]:
            lines.append(f"- {f}")
    if a["balancer_errors"]:
        lines.append("")
        lines.append("Balancer errors:")
        for e in a["balancer_errors"][:20]:
            lines.append(f"- node {e['node']} at t={e['t']}s: {e['error']}")
    if cl.get("error_examples"):
        lines.append("")
        lines.append("First client errors:")
        for e in cl["error_examples"][:10]:
            lines.append(f"- t={e['t']}s {e['thread']} SET {e['key']}: {e['error']}")
    return "\n".join(lines)


def report(a):
    with open(a.run) as f:
        r = json.load(f)
    problems = []
    if a.stop:
        try:
            with open(a.stop) as f:
                problems = [x.strip() for x in f if x.strip()]
        except OSError as e:
            problems = [f"no record of the cluster's stop ({e})"]
    an = analyse(r, problems)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pass": an["pass"], "checks": an["checks"], "params": r["params"],
                       "analysis": an, "run": r}, f, indent=1, default=str)
            f.write("\n")
    print(summary_md(r, an), flush=True)
    for c in an["checks"]:
        if not c["ok"]:
            print(f"balancer: FAIL: {c['check']}: {c['result']}", file=sys.stderr)
    for f in an["failures"]:
        print(f"balancer: FAIL: {f}", file=sys.stderr)
    return 0 if an["pass"] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    r = sub.add_parser("run", help="the load, the timeline, the logs, the read-back")
    r.add_argument("--bin", required=True, help="the pliant binary")
    r.add_argument("--up", required=True, help="the first stdout line of `pliant cluster up`")
    r.add_argument("--out", required=True, help="where the raw results go")
    r.add_argument("--duration", type=int, default=90)
    r.add_argument("--interval", default="2s", help="the --balancer-interval the nodes run at")
    r.add_argument("--writers", type=int, default=2)
    r.add_argument("--rate", type=float, default=0, help="ops/s per writer (0: no limit)")
    r.add_argument("--hot-keys", type=int, default=2000)
    r.add_argument("--other-keys", type=int, default=1000)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--policy", default="cephfs-greedy-spill")
    r.add_argument("--param", action="append", default=[], help="a --balancer-param given")
    r.add_argument("--slot-window", type=int, default=None,
                   help="the --balancer-slot-window the nodes run with (none: their default)")
    rep = sub.add_parser("report", help="the summary and the checks")
    rep.add_argument("--run", required=True, help="what `run` wrote")
    rep.add_argument("--stop", default="", help="what did not stop cleanly, a line each")
    rep.add_argument("--json", default="", help="write everything here")
    a = ap.parse_args()
    return run(a) if a.step == "run" else report(a)


if __name__ == "__main__":
    sys.exit(main())
