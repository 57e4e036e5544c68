#!/usr/bin/env python3
"""The driver of tools/bench/rescale_cycles.sh (see its header for what is measured and how to
read it). Needs redis-py (`redis.cluster.RedisCluster`); run with target/compat-venv/bin/python.

Given a running `pliant cluster up --json` (its first stdout line in --up, its directory in
--dir), it:

  1. writes every key once (the write log starts), checks the cluster against the log (a checksum
     of all keys read through the cluster; total keys from `pliant cluster status`);
  2. starts the load: WRITERS threads, each its own RedisCluster and its own share of the keys,
     SET values carrying a per-key counter and log every acknowledged SET in order (and read
     their own keys back now and then); READERS threads GET random keys. Every read is checked:
     a value that was written (its counter at most the highest one sent for the key, the rest of
     the value derived from key and counter), and not older than the last write of that key
     acknowledged before the GET was sent. Any exception that reaches the caller (redis-py follows
     MOVED and ASK, retries TRYAGAIN, and re-reads the topology on a connection error by itself)
     counts as a client error;
  3. runs CYCLES random commission/decommission cycles (`pliant scale ... --json`) between 2 and
     8 nodes, the strategy alternating lt, ldt; after each: `pliant cluster status --json` with the
     load running (D_max/D_t, L_max/L_t measured; the map's owners against the report; retired
     processes gone);
  4. stops the load, checks the cluster against the write log again, prints the markdown summary,
     writes the JSON (--json), exits 1 on any failure (each named on stderr and in the summary).

With --etcd URL (the cluster's state in etcd: no supervisor starts or stops nodes for `pliant
scale`) it also starts the nodes each commission takes and stops, by pid, the nodes each
decommission removes (see EtcdNodes), and at the end the nodes it started that still run.
"""

import argparse
import array
import hashlib
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback

from redis import Redis
from redis.cluster import PRIMARY, ClusterNode, RedisCluster

MIN_NODES, MAX_NODES = 2, 8
SLOTS = 16384
STRATEGIES = ("lt", "ldt")

T0 = time.monotonic()


def log(msg):
    print(f"rescale_cycles [{time.monotonic() - T0:7.1f}s]: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Keys and values

def key_name(i):
    return f"rc:{i}"


def pad_of(key):
    """Filler of 16..240 bytes, derived from the key: slots end up with different sizes."""
    h = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return (h * 8)[: 16 + int(h[:4], 16) % 225]


def pad_to(key, size):
    """Filler derived from the key that makes its values about `size` bytes long in all."""
    h = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    n = max(16, size - len(key) - 12)
    return (h * (n // len(h) + 1))[:n]


class Keys:
    def __init__(self, n, value_size=0):
        self.names = [key_name(i) for i in range(n)]
        self.pads = [pad_to(k, value_size) if value_size else pad_of(k) for k in self.names]
        self.index = {k: i for i, k in enumerate(self.names)}

    def value(self, i, counter):
        return f"{counter}|{self.names[i]}|{self.pads[i]}"

    def counter_of(self, i, v):
        """The counter a value of key i carries, or None if it is no value of this key."""
        c, sep, _ = v.partition("|")
        if not sep or not c.isdigit():
            return None
        c = int(c)
        return c if v == self.value(i, c) else None


# ---------------------------------------------------------------------------------------------
# The load

class Shared:
    """State every load thread sees. Lists of ints: an item assignment is atomic under the GIL."""

    def __init__(self, keys, writers):
        n = len(keys.names)
        self.keys = keys
        self.issued = [0] * n  # highest counter sent (set before the SET goes out)
        self.acked = [0] * n  # counter of the last acknowledged SET
        self.log_keys = [array.array("I") for _ in range(writers + 1)]  # [writers] = preload
        self.log_counters = [array.array("I") for _ in range(writers + 1)]
        self.stop = threading.Event()
        self.cycle = 0  # the cycle running (0 before the first), for naming where errors happened
        self.lock = threading.Lock()
        self.errors = []  # first few client errors, in detail
        self.error_count = 0
        self.error_types = {}
        self.bad_reads = []  # first few wrong reads, in detail
        self.bad_read_count = {"stale": 0, "phantom": 0, "missing": 0}
        self.writes = 0
        self.reads = 0
        self.refreshes = 0  # topology re-reads by redis-py (after a connection error, ...)
        self.moved = 0  # MOVED answers redis-py followed
        self.ask_unknown = 0  # ASKs to a node redis-py did not know, followed by ask_patch
        self.ask_patch = True
        self.thread_failures = []

    def client_error(self, thread, op, key, e):
        with self.lock:
            self.error_count += 1
            name = type(e).__name__
            self.error_types[name] = self.error_types.get(name, 0) + 1
            if len(self.errors) < 50:
                where = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                         for f in traceback.extract_tb(e.__traceback__)[-4:]]
                self.errors.append({
                    "cycle": self.cycle, "t": round(time.monotonic() - T0, 3), "thread": thread,
                    "op": op, "key": key, "error": f"{name}: {e}", "where": where})

    def check_read(self, thread, i, lo, v, hi):
        """A GET of key i sent after the write of counter lo was acknowledged and answered
        before any write above counter hi was sent."""
        if v is None:
            kind, c = "missing", None
        else:
            c = self.keys.counter_of(i, v)
            if c is None or c > hi:
                kind = "phantom"
            elif c < lo:
                kind = "stale"
            else:
                return
        with self.lock:
            self.bad_read_count[kind] += 1
            if len(self.bad_reads) < 50:
                self.bad_reads.append({
                    "cycle": self.cycle, "t": round(time.monotonic() - T0, 3), "thread": thread,
                    "kind": kind, "key": self.keys.names[i], "read": v, "read_counter": c,
                    "acked_before_read": lo, "highest_sent": hi})


def make_client(shared, startup, timeout):
    rc = RedisCluster(startup_nodes=[ClusterNode(h, int(p)) for h, p in startup],
                      decode_responses=True, socket_timeout=timeout,
                      socket_connect_timeout=timeout)
    nm = rc.nodes_manager
    init, moved = nm.initialize, nm.update_moved_exception

    def counted_init(*a, **kw):
        with shared.lock:
            shared.refreshes += 1
        return init(*a, **kw)

    def counted_moved(*a, **kw):
        with shared.lock:
            shared.moved += 1
        return moved(*a, **kw)

    nm.initialize, nm.update_moved_exception = counted_init, counted_moved
    if shared.ask_patch:
        # redis-py (6.4 included) follows -ASK only to a node in its cache: an ASK to a node
        # that owns no slot yet (a commissioned one) ends in AttributeError ('NoneType' object
        # has no attribute 'redis_connection'), as with Redis Cluster's own resharding
        # (redis/redis-py#2432). Here, and only there, the node is added as a MOVED to an
        # unknown node adds it, and counted. --strict-client leaves redis-py as it is.
        get_node = rc.get_node

        def ask_get_node(host=None, port=None, node_name=None):
            n = get_node(host, port, node_name)
            if (n is None and node_name and not host
                    and sys._getframe(1).f_code.co_name == "_execute_command"):
                h, _, p = node_name.rpartition(":")
                n = ClusterNode(h, int(p), PRIMARY)
                nm.nodes_cache[n.name] = n
                with shared.lock:
                    shared.ask_unknown += 1
            return n

        rc.get_node = ask_get_node
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


def run_thread(shared, name, body, deadline):
    try:
        body(deadline)
    except Exception as e:  # a bug of the driver, not a client error: named as such
        with shared.lock:
            shared.thread_failures.append(f"{name}: {type(e).__name__}: {e}")
        shared.stop.set()


def writer(shared, w, writers, startup, rate, seed, timeout, read_every):
    keys = shared.keys
    mine = list(range(w, len(keys.names), writers))
    rnd = random.Random(seed * 1000 + w)
    name = f"writer-{w}"
    lk, lc = shared.log_keys[w], shared.log_counters[w]

    def body(deadline):
        rc = make_client(shared, startup, timeout)
        pacer = Pacer(rate)
        n = 0
        try:
            while not shared.stop.is_set() and time.monotonic() < deadline:
                pacer.wait(shared.stop)
                i = rnd.choice(mine)
                n += 1
                if read_every and n % read_every == 0:  # read one of its own keys back
                    lo = shared.acked[i]
                    try:
                        v = rc.get(keys.names[i])
                    except Exception as e:
                        shared.client_error(name, "GET", keys.names[i], e)
                        continue
                    shared.check_read(name, i, lo, v, shared.issued[i])
                    with shared.lock:
                        shared.reads += 1
                    continue
                c = shared.issued[i] + 1
                shared.issued[i] = c
                try:
                    ok = rc.set(keys.names[i], keys.value(i, c))
                except Exception as e:
                    shared.client_error(name, "SET", keys.names[i], e)
                    continue
                if ok is not True:
                    shared.client_error(name, "SET", keys.names[i],
                                        RuntimeError(f"SET answered {ok!r}"))
                    continue
                lk.append(i)
                lc.append(c)
                shared.acked[i] = c
                with shared.lock:
                    shared.writes += 1
        finally:
            rc.close()

    return name, body


def reader(shared, r, startup, rate, seed, timeout):
    keys = shared.keys
    n = len(keys.names)
    rnd = random.Random(seed * 1000 + 500 + r)
    name = f"reader-{r}"

    def body(deadline):
        rc = make_client(shared, startup, timeout)
        pacer = Pacer(rate)
        try:
            while not shared.stop.is_set() and time.monotonic() < deadline:
                pacer.wait(shared.stop)
                i = rnd.randrange(n)
                lo = shared.acked[i]
                try:
                    v = rc.get(keys.names[i])
                except Exception as e:
                    shared.client_error(name, "GET", keys.names[i], e)
                    continue
                shared.check_read(name, i, lo, v, shared.issued[i])
                with shared.lock:
                    shared.reads += 1
        finally:
            rc.close()

    return name, body


# ---------------------------------------------------------------------------------------------
# pliant commands

class Pliant:
    def __init__(self, binary, failures):
        self.bin = binary
        self.failures = failures

    def run(self, args, timeout, what, cycle):
        """Runs `pliant ARGS`; returns its parsed JSON stdout, or None after recording a failure
        (the exact command, its exit status and stderr)."""
        cmd = [self.bin] + args
        t = time.monotonic()
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout)  # on timeout: killed by its pid, and reaped
        except subprocess.TimeoutExpired as e:
            self.fail(what, cycle, cmd, f"did not finish within {timeout} s (killed)",
                      (e.stderr or b"").decode(errors="replace")
                      if isinstance(e.stderr, bytes) else (e.stderr or ""))
            return None, time.monotonic() - t
        wall = time.monotonic() - t
        if p.returncode != 0:
            self.fail(what, cycle, cmd, f"exit status {p.returncode}", p.stderr, p.stdout)
            return None, wall
        try:
            return json.loads(p.stdout), wall
        except ValueError as e:
            self.fail(what, cycle, cmd, f"printed no JSON ({e})", p.stderr, p.stdout)
            return None, wall

    def fail(self, what, cycle, cmd, why, stderr="", stdout=""):
        self.failures.append({
            "what": f"{what}: `{shlex.join(cmd)}` {why}", "cycle": cycle,
            "command": shlex.join(cmd), "stderr": (stderr or "")[-4000:],
            "stdout": (stdout or "")[-2000:]})
        log(f"FAIL (cycle {cycle}): {what}: {shlex.join(cmd)}: {why}\n  stderr: "
            + (stderr or "").strip()[-2000:].replace("\n", "\n  stderr: "))

    def status(self, addr, window, cycle, what="pliant cluster status"):
        return self.run(["cluster", "status", addr, "--json", "--window", window], 120, what,
                        cycle)[0]


def owners(status):
    return [n for n in status["nodes"] if n["slots"] > 0]


def ratio_max_mean(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    mean = sum(xs) / len(xs)
    return max(xs) / mean if mean > 0 else None


def balance(status):
    own = owners(status)
    return {
        "nodes": len(own),
        "d_ratio_bytes": ratio_max_mean([n["memory_bytes"] for n in own]),
        "d_ratio_keys": ratio_max_mean([n["keys"] for n in own]),
        "l_ratio": ratio_max_mean([n["ops_per_s"] for n in own]),
        "per_node": [{k: n[k] for k in ("id", "addr", "slots", "keys", "memory_bytes",
                                        "ops_per_s")} for n in own],
    }


def processes_with(arg):
    """Pids of the processes whose command line contains `arg` (from /proc)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if arg in cmdline and state != "Z":
            found.append(int(d))
    return found


def pid_runs(pid, arg):
    """Whether process `pid` runs (not a zombie) with `arg` on its command line (so a reused pid
    is not taken for the node)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return arg in cmdline and state != "Z"


def live_members(addr, timeout):
    """{id: addr} of the live members (lease current) in the view of node `addr`, or None if it
    could not be asked."""
    h, _, p = addr.rpartition(":")
    try:
        r = Redis(host=h, port=int(p), socket_timeout=timeout, socket_connect_timeout=timeout,
                  decode_responses=True)
        try:
            v = json.loads(r.execute_command("PLIANT.CLUSTER"))
        finally:
            r.close()
        return {m["id"]: m["addr"] for m in v["state"]["members"]}
    except Exception:
        return None


class EtcdNodes:
    """With --etcd no supervisor starts or stops nodes for `pliant scale`: a commission waits for
    live nodes the map does not name, a decommission only takes the nodes out of the map. This
    starts the new nodes (`pliant serve --etcd URL --bind 127.0.0.1:0 --store DIR/extra-<n>
    --node-id ID`, each its own store and log) before a commission, and stops (SIGTERM by pid,
    waited for) every node a decommission removed: the extra ones and those of `pliant cluster
    up` (its supervisor then reports them exited)."""

    JOIN = 30.0  # a started node joins (is a live member) within this
    STOP = 30.0  # a SIGTERMed node exits within this, else SIGKILL (and a failure)

    def __init__(self, binary, url, cdir, up, failures):
        self.bin, self.url, self.dir, self.failures = binary, url, cdir, failures
        self.pid_of = {}  # node id -> pid, every node process this run knows of
        self.extra = {}  # node id -> Popen, the nodes started here
        self.logs = {}  # node id -> log file
        self.n = 0
        self.started = self.stopped = 0
        for i, pid in enumerate(up.get("pids", [])):
            with open(os.path.join(cdir, f"node-{i}.id")) as f:
                nid = f.read().strip()
            if not pid_runs(pid, f"--node-id {nid}"):
                raise RuntimeError(f"pid {pid} of `pliant cluster up` is not node {i} ({nid})")
            self.pid_of[nid] = pid
            self.logs[nid] = os.path.join(cdir, f"node-{i}.log")

    def _log_tail(self, nid, lines=15):
        try:
            with open(self.logs[nid], errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def start(self, count, ask, cycle):
        """Starts `count` nodes and waits until node `ask` sees each one as a live member; their
        ids, or None after recording a failure."""
        ids, t = [], time.monotonic()
        for _ in range(count):
            self.n += 1
            nid = hashlib.sha1(f"{self.dir}|extra-{self.n}|{time.time_ns()}".encode()).hexdigest()
            store = os.path.join(self.dir, f"extra-{self.n}")
            logf = os.path.join(self.dir, f"extra-{self.n}.log")
            cmd = [self.bin, "serve", "--etcd", self.url, "--bind", "127.0.0.1:0", "--store",
                   store, "--node-id", nid]
            with open(logf, "ab") as lf:
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=lf, start_new_session=False)
            self.extra[nid], self.pid_of[nid], self.logs[nid] = p, p.pid, logf
            self.started += 1
            ids.append(nid)
        deadline = t + self.JOIN
        while True:
            for nid in ids:
                rc = self.extra[nid].poll()
                if rc is not None:
                    self._fail(cycle, f"new node {nid} (`{shlex.join(self.extra[nid].args)}`) "
                               f"exited with {rc} before joining", self._log_tail(nid))
                    return None
            members = live_members(ask, 5.0) or {}
            if all(nid in members for nid in ids):
                return ids
            if time.monotonic() > deadline:
                self._fail(cycle, f"new nodes {[n for n in ids if n not in members]} were no "
                           f"live members at {ask} {self.JOIN:.0f} s after they started",
                           "\n".join(self._log_tail(n) for n in ids))
                return None
            time.sleep(0.1)

    def stop(self, ids, ask, cycle):
        """SIGTERM to each node's process, by its pid; waits for each to exit (SIGKILL after
        STOP s, a failure), then until node `ask` no longer sees them as live members. Returns
        when each exited and when its lease was gone (seconds after the SIGTERMs)."""
        t0 = time.monotonic()
        detail = {nid: {} for nid in ids}
        for nid in ids:
            pid = self.pid_of.get(nid)
            if pid is None:
                self._fail(cycle, f"node {nid} was removed, but this run knows no process of it")
                continue
            p = self.extra.get(nid)
            if p is not None:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            elif pid_runs(pid, f"--node-id {nid}"):
                os.kill(pid, signal.SIGTERM)
        for nid in ids:
            pid = self.pid_of.pop(nid, None)
            if pid is None:
                continue
            p = self.extra.pop(nid, None)
            t_end = time.monotonic() + self.STOP
            if p is not None:
                try:
                    rc = p.wait(timeout=self.STOP)
                    if rc != 0:
                        self._fail(cycle, f"node {nid} (pid {pid}) exited with {rc} after "
                                   "SIGTERM", self._log_tail(nid))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                    self._fail(cycle, f"node {nid} (pid {pid}) did not stop within "
                               f"{self.STOP:.0f} s of SIGTERM (killed)", self._log_tail(nid))
            else:  # a child of the supervisor, which reaps it
                while pid_runs(pid, f"--node-id {nid}") and time.monotonic() < t_end:
                    time.sleep(0.05)
                if pid_runs(pid, f"--node-id {nid}"):
                    os.kill(pid, signal.SIGKILL)
                    self._fail(cycle, f"node {nid} (pid {pid}) did not stop within "
                               f"{self.STOP:.0f} s of SIGTERM (killed)", self._log_tail(nid))
            detail[nid]["exit_s"] = round(time.monotonic() - t0, 3)
            self.stopped += 1
        # A clean exit should end the node's lease; a lease left behind (until it lapses) would
        # make the node look idle and free to take slots to the next commission.
        t_end = time.monotonic() + 15
        while True:
            members = live_members(ask, 5.0)
            if members is not None:
                for nid in ids:
                    if nid not in members and "lease_gone_s" not in detail[nid]:
                        detail[nid]["lease_gone_s"] = round(time.monotonic() - t0, 3)
            left = [n for n in ids if "lease_gone_s" not in detail[n]]
            if not left:
                break
            if time.monotonic() > t_end:
                self._fail(cycle, f"stopped nodes {left} still live members at {ask} 15 s "
                           "after they exited", "\n".join(self._log_tail(n) for n in left))
                break
            time.sleep(0.1)
        late = {n: d for n, d in detail.items()
                if d.get("lease_gone_s", 99) - d.get("exit_s", 0) > 1.0}
        if late:
            log(f"cycle {cycle}: a stopped node's lease outlived its process by over 1 s "
                f"(ended when it lapsed, not at the exit?): {late}")
        return detail

    def stop_all(self, cycle):
        """SIGTERM to the nodes started here that still run (the end of the run, or an
        interrupt), by their pids; each waited for (SIGKILL after STOP s: a failure). The nodes
        of `pliant cluster up` are its supervisor's to stop."""
        for nid, p in list(self.extra.items()):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for nid, p in list(self.extra.items()):
            try:
                rc = p.wait(timeout=self.STOP)
                if rc != 0:
                    self._fail(cycle, f"node {nid} (pid {p.pid}) exited with {rc} after "
                               "SIGTERM at the end", self._log_tail(nid))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                self._fail(cycle, f"node {nid} (pid {p.pid}) did not stop within "
                           f"{self.STOP:.0f} s of SIGTERM at the end (killed)", self._log_tail(nid))
            del self.extra[nid]
            self.pid_of.pop(nid, None)
            self.stopped += 1

    def _fail(self, cycle, what, log_tail=""):
        self.failures.append({"what": f"etcd node processes: {what}", "cycle": cycle,
                              "stderr": log_tail[-4000:]})
        log(f"FAIL (cycle {cycle}): {what}"
            + (("\n  log: " + log_tail.strip()[-2000:].replace("\n", "\n  log: "))
               if log_tail.strip() else ""))


# ---------------------------------------------------------------------------------------------
# Checks against the write log

def log_last(shared):
    """The last acknowledged counter of every key, replayed from the write log (in order)."""
    last = [None] * len(shared.keys.names)
    w = len(shared.log_keys) - 1  # the first writes come first, then every writer's log
    for lk, lc in [(shared.log_keys[w], shared.log_counters[w])] + list(
            zip(shared.log_keys[:w], shared.log_counters[:w])):
        for i, c in zip(lk, lc):  # one writer per key: its own log is that key's order
            last[i] = c
    return last


def digest(pairs):
    h = hashlib.sha256()
    for k, v in sorted(pairs):
        h.update(f"{k}\t{v}\n".encode())
    return h.hexdigest()


def check_against_log(shared, pliant, startup, addr, when, cycle, failures, timeout):
    keys = shared.keys
    last = log_last(shared)
    res = {"when": when}
    if last != shared.acked:
        failures.append({"what": f"{when}: the write log and the acknowledged counters disagree "
                         "(a driver bug)", "cycle": cycle})
    written = [i for i, c in enumerate(last) if c is not None]
    res["distinct_keys_written"] = len(written)
    res["log_entries"] = sum(len(a) for a in shared.log_keys)
    want = {keys.names[i]: keys.value(i, last[i]) for i in written}
    got = {}
    rc = RedisCluster(startup_nodes=[ClusterNode(h, int(p)) for h, p in startup],
                      decode_responses=True, socket_timeout=timeout,
                      socket_connect_timeout=timeout)
    try:
        names = keys.names
        for s in range(0, len(names), 500):
            chunk = names[s:s + 500]
            for k, v in zip(chunk, rc.mget_nonatomic(chunk)):
                if v is not None:
                    got[k] = v
    except Exception as e:
        failures.append({"what": f"{when}: reading every key through the cluster failed: "
                         f"{type(e).__name__}: {e}", "cycle": cycle})
        res["read_error"] = f"{type(e).__name__}: {e}"
        return res
    finally:
        rc.close()
    res["checksum_log"] = digest(want.items())
    res["checksum_cluster"] = digest(got.items())
    res["checksum_equal"] = res["checksum_log"] == res["checksum_cluster"]
    diff = {"lost": [], "missing": [], "in_doubt": [], "wrong": [], "unexpected": []}
    for k in sorted(set(want) | set(got)):
        if want.get(k) == got.get(k):
            continue
        i = keys.index[k]
        if k not in want:
            diff["unexpected"].append({"key": k, "read": got[k]})
        elif k not in got:
            diff["missing"].append({"key": k, "last_acked": last[i]})
        else:
            c = keys.counter_of(i, got[k])
            entry = {"key": k, "read_counter": c, "last_acked": last[i],
                     "highest_sent": shared.issued[i]}
            if c is None:
                diff["wrong"].append(dict(entry, read=got[k]))
            elif c < last[i]:
                diff["lost"].append(entry)  # an acknowledged write is gone
            elif c <= shared.issued[i]:
                diff["in_doubt"].append(entry)  # a SET that raised an error did happen
            else:
                diff["wrong"].append(entry)
    res["differences"] = {k: len(v) for k, v in diff.items()}
    res["difference_examples"] = {k: v[:10] for k, v in diff.items() if v}
    if not res["checksum_equal"]:
        failures.append({"what": f"{when}: checksum of the cluster's keys differs from the "
                         f"write log's: {res['differences']}; e.g. "
                         f"{json.dumps(res['difference_examples'])[:1500]}", "cycle": cycle})
    st = pliant.status(addr, "200ms", cycle, f"{when}: pliant cluster status")
    if st is not None:
        own = owners(st)
        counts = [n["keys"] for n in own]
        res["status_keys_total"] = sum(c for c in counts if c is not None)
        res["status_nodes"] = len(own)
        res["keys_total_equal"] = None not in counts and res["status_keys_total"] == len(written)
        if not res["keys_total_equal"]:
            failures.append({"what": f"{when}: `pliant cluster status` counts "
                             f"{res['status_keys_total']} keys over {len(own)} nodes "
                             f"({counts}), {len(written)} distinct keys were written",
                             "cycle": cycle})
        if st["slots_assigned"] != SLOTS or st["slots_migrating"] != 0:
            failures.append({"what": f"{when}: slots assigned {st['slots_assigned']}, "
                             f"migrating {st['slots_migrating']}", "cycle": cycle})
    return res


# ---------------------------------------------------------------------------------------------
# Summary

def quantile(xs, q):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


def summary_md(out):
    p, cycles, checks = out["params"], out["cycles"], out["checks"]
    lines = []
    ok = not out["failures"]
    lines.append(f"## Rescaling cycles under load: {'PASS' if ok else 'FAIL'}")
    lines.append("")
    lines.append(
        f"Seed {p['seed']}; {p['cycles']} cycles between {MIN_NODES} and {MAX_NODES} nodes, "
        f"starting from {p['start_nodes']}; "
        + ("embedded coordination store" if p["coordination"] == "embedded" else
           f"cluster state in etcd {p.get('etcd_version') or ''} (node processes started and "
           "stopped by the driver)") + f"; {p['keys']} keys; "
        f"load: {p['writers']} writer + {p['readers']} reader threads (redis-py RedisCluster), "
        f"{p['rate'] or 'unlimited'} ops/s each; --window {p['window']}, --parallel "
        f"{p['parallel']}.")
    lines.append("")
    cl = out["client"]
    before = checks.get("before", {})
    after = checks.get("after", {})
    yn = {True: "yes", False: "**no**", None: "not checked"}
    walls = [c["cycle_wall_s"] for c in cycles]
    lines += [
        "| check | result |",
        "|---|---|",
        f"| cycles run | {len(cycles)} of {p['cycles']} "
        f"({sum(c['kind'] == 'commission' for c in cycles)} commission, "
        f"{sum(c['kind'] == 'decommission' for c in cycles)} decommission) |",
        f"| failures | {len(out['failures'])} |",
        f"| checksum equal before the first cycle | {yn[before.get('checksum_equal')]} |",
        f"| checksum equal after the last cycle | {yn[after.get('checksum_equal')]} |",
        f"| keys in `cluster status` = distinct keys written (before / after) | "
        f"{yn[before.get('keys_total_equal')]} / {yn[after.get('keys_total_equal')]} |",
        f"| acknowledged writes (write log) / reads checked | {cl['writes']:,} / "
        f"{cl['reads']:,} |",
        f"| client errors (not a redirect followed) | {cl['errors']} |",
        f"| reads older than an acknowledged write / never written / missing | "
        f"{cl['bad_reads']['stale']} / {cl['bad_reads']['phantom']} / "
        f"{cl['bad_reads']['missing']} |",
        f"| MOVED followed / topology re-reads by redis-py | {cl['moved']:,} / "
        f"{cl['topology_refreshes']:,} |",
        f"| ASK to a node redis-py did not know yet (redis-py#2432) | "
        + (f"{cl['ask_unknown']:,}, followed by the driver's patch |" if not p["strict_client"]
           else "not patched (--strict-client): each one is a client error |"),
        f"| cycles whose map the node asked right after showed late (slots still migrating"
        f" or owners not yet the report's) / longest wait | "
        f"{sum(c.get('view', {}).get('polls', 1) > 1 for c in cycles)} / "
        f"{fmt(max([c.get('view', {}).get('settle_s', 0) for c in cycles] or [0]), '.1f')} s |",
        f"| wall time per cycle, median (p90) | {fmt(quantile(walls, .5), '.1f')} s "
        f"({fmt(quantile(walls, .9), '.1f')} s) |",
        f"| total run time | {out['total_seconds']:.0f} s |",
    ]
    if p["coordination"] == "etcd":
        en = out.get("etcd_nodes", {})
        starts = [c["etcd"]["start_s"] for c in cycles if "start_s" in c.get("etcd", {})]
        stops = [c["etcd"]["stop_s"] for c in cycles if "stop_s" in c.get("etcd", {})]
        late = [d for c in cycles for d in c.get("etcd", {}).get("stop_detail", {}).values()
                if d.get("lease_gone_s", 99) - d.get("exit_s", 0) > 1.0]
        lines.append(f"| node processes the driver started / stopped (etcd: no supervisor) | "
                     f"{en.get('started', '–')} / {en.get('stopped', '–')} |")
        lines.append(f"| removed nodes whose lease outlived their process by over 1 s "
                     f"(the driver waits it out before the next cycle) | {len(late)} |")
        lines.append(f"| starting new nodes until they are live members, median (max) / "
                     f"stopping removed ones until their leases are gone, median (max) | "
                     f"{fmt(quantile(starts, .5), '.1f')} s "
                     f"({fmt(max(starts) if starts else None, '.1f')} s) / "
                     f"{fmt(quantile(stops, .5), '.1f')} s "
                     f"({fmt(max(stops) if stops else None, '.1f')} s) |")
    bws = [c["bandwidth_bytes_per_s"] for c in cycles if c.get("bandwidth_bytes_per_s")]
    if bws:
        lines.append(f"| loopback bandwidth the planner measured, median | "
                     f"{quantile(bws, .5) / 1e6:.0f} MB/s |")
    lines.append("")
    lines.append("| strategy | cycles | seconds, median | planned T_t, median | "
                 "seconds/T_t median | seconds/T_t p90 | measured D_max/D_t (bytes) | "
                 "(keys) | measured L_max/L_t | planned D_max/D_t | planned L_max/L_t | "
                 "MB moved, median |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in STRATEGIES:
        cs = [c for c in cycles if c["strategy"] == s]
        if not cs:
            continue
        col = lambda f: [f(c) for c in cs]  # noqa: E731
        lines.append(
            f"| {s} | {len(cs)} | {fmt(quantile(col(lambda c: c['seconds']), .5), '.2f')} | "
            f"{fmt(quantile(col(lambda c: c['planned_t_t']), .5), '.4f')} | "
            f"{fmt(quantile(col(lambda c: c['seconds_over_t_t']), .5), '.1f')} | "
            f"{fmt(quantile(col(lambda c: c['seconds_over_t_t']), .9), '.1f')} | "
            f"{fmt(quantile(col(lambda c: c['measured']['d_ratio_bytes']), .5), '.3f')} | "
            f"{fmt(quantile(col(lambda c: c['measured']['d_ratio_keys']), .5), '.3f')} | "
            f"{fmt(quantile(col(lambda c: c['measured']['l_ratio']), .5), '.3f')} | "
            f"{fmt(quantile(col(lambda c: c['planned_d_ratio']), .5), '.3f')} | "
            f"{fmt(quantile(col(lambda c: c['planned_l_ratio']), .5), '.3f')} | "
            f"{fmt(quantile(col(lambda c: c['bytes_moved'] / 1e6), .5), '.2f')} |")
    lines.append("")
    lines.append("seconds: the report's `seconds` (wall time of the moves); T_t: the planner's "
                 "target transfer time (`planned.t_t`) at the bandwidth it measured; measured "
                 "ratios: max over mean of the slot owners' `memory_bytes` (`keys`) and "
                 "`ops_per_s` from `pliant cluster status --json --window 1s` right after the "
                 "cycle, load running.")
    if out["failures"]:
        lines.append("")
        lines.append("Failures:")
        for f in out["failures"][:30]:
            lines.append(f"- cycle {f.get('cycle')}: {f['what']}")
            if f.get("stderr"):
                lines.append(f"  stderr: `{f['stderr'].strip()[-600:]}`".replace("\n", " | "))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the pliant binary")
    ap.add_argument("--up", required=True, help="the first stdout line of `pliant cluster up`")
    ap.add_argument("--dir", required=True, help="the cluster's --dir")
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write every cycle here")
    ap.add_argument("--keys", type=int, default=4000)
    ap.add_argument("--value-size", type=int, default=0,
                    help="bytes a value, about (0: 16-240 bytes of filler)")
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--readers", type=int, default=3)
    ap.add_argument("--rate", type=float, default=150, help="ops/s per thread (0: no limit)")
    ap.add_argument("--window", default="2s", help="--window of pliant scale")
    ap.add_argument("--parallel", type=int, default=4, help="--parallel of pliant scale")
    ap.add_argument("--scale-timeout", type=float, default=600)
    ap.add_argument("--strict-client", action="store_true",
                    help="redis-py as it is: an ASK to a node it does not know fails")
    ap.add_argument("--etcd", default="", metavar="URL",
                    help="the cluster's state is in etcd at URL: start the nodes a commission "
                    "takes, stop those a decommission removes")
    a = ap.parse_args()
    # Stopped by the wrapper: SystemExit unwinds, and subprocess.run kills the pliant command
    # it waits for (by its pid) on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for name in ("cycles", "keys", "writers", "readers", "parallel"):
        if getattr(a, name) < (0 if name == "cycles" else 1):
            ap.error(f"--{name} must be positive")

    global ETCD_NODES
    failures = []
    pliant = Pliant(a.bin, failures)
    with open(a.up) as f:
        up = json.loads(f.readline())
    if a.etcd:
        ETCD_NODES = EtcdNodes(a.bin, a.etcd, a.dir, up, failures)
    etcd_nodes = ETCD_NODES
    nodes = [(n["id"], n["addr"]) for n in up["nodes"]]
    startup = [tuple(addr.rsplit(":", 1)) for _, addr in nodes]
    addrs = [addr for _, addr in nodes]
    if not MIN_NODES <= len(nodes) <= MAX_NODES:
        sys.exit(f"rescale_cycles: the cluster has {len(nodes)} nodes, not {MIN_NODES}-{MAX_NODES}")
    keys = Keys(a.keys, a.value_size)
    shared = Shared(keys, a.writers)
    shared.ask_patch = not a.strict_client
    op_timeout = 10.0
    out = {"params": {"seed": a.seed, "cycles": a.cycles, "start_nodes": len(nodes),
                      "keys": a.keys, "writers": a.writers, "readers": a.readers,
                      "rate": a.rate, "window": a.window, "parallel": a.parallel,
                      "coordination": "etcd" if a.etcd else "embedded",
                      "strict_client": a.strict_client},
           "checks": {}, "cycles": [], "failures": failures}
    if a.etcd:
        out["params"]["etcd_url"] = a.etcd
        try:
            out["params"]["etcd_version"] = subprocess.run(
                ["etcd", "--version"], capture_output=True, text=True, timeout=10
            ).stdout.splitlines()[0].split(":", 1)[1].strip()
        except Exception:
            out["params"]["etcd_version"] = None

    # 1. Every key written once (the write log's first entries), then checked.
    log(f"{len(nodes)} nodes up; writing {a.keys} keys")
    rc = make_client(shared, startup, op_timeout)
    try:
        for i in range(a.keys):
            shared.issued[i] = 1
            if rc.set(keys.names[i], keys.value(i, 1)) is not True:
                raise RuntimeError(f"SET {keys.names[i]} was not acknowledged")
            shared.log_keys[a.writers].append(i)
            shared.log_counters[a.writers].append(1)
            shared.acked[i] = 1
    except Exception as e:
        failures.append({"what": f"writing the first keys: {type(e).__name__}: {e}", "cycle": 0})
    finally:
        rc.close()
    if not failures:
        out["checks"]["before"] = check_against_log(shared, pliant, startup, addrs[0],
                                                    "before the first cycle", 0, failures,
                                                    op_timeout)
        log(f"before: checksum equal {out['checks']['before'].get('checksum_equal')}, keys "
            f"{out['checks']['before'].get('status_keys_total')} of {a.keys}")

    # 2. The load.
    deadline = time.monotonic() + a.cycles * (a.scale_timeout + 300) + 600  # a bound, not a plan
    threads = []
    if not failures:
        bodies = [writer(shared, w, a.writers, startup, a.rate, a.seed, op_timeout, 10)
                  for w in range(a.writers)]
        bodies += [reader(shared, r, startup, a.rate, a.seed, op_timeout)
                   for r in range(a.readers)]
        for name, body in bodies:
            t = threading.Thread(target=run_thread, args=(shared, name, body, deadline),
                                 name=name, daemon=True)
            t.start()
            threads.append(t)
        log(f"load started: {a.writers} writers, {a.readers} readers")
        time.sleep(3)  # the load reaches the nodes' counters before the first plan reads them

    # 3. The cycles.
    rnd = random.Random(a.seed)
    current = list(nodes)  # (id, addr) of the slot owners
    for cyc in range(1, a.cycles + 1):
        if failures or shared.thread_failures:
            break
        shared.cycle = cyc
        n = len(current)
        strategy = STRATEGIES[(cyc - 1) % 2]
        if n <= MIN_NODES:
            kind = "commission"
        elif n >= MAX_NODES:
            kind = "decommission"
        else:
            kind = rnd.choice(("commission", "decommission"))
        if kind == "commission":
            count = rnd.randint(1, min(3, MAX_NODES - n))
            remove = []
            via = rnd.choice(current)[1]
            args = ["scale", "commission", "--cluster", via, "--add", str(count)]
        else:
            count = rnd.randint(1, min(3, n - MIN_NODES))
            remove = [nid for nid, _ in rnd.sample(current, count)]
            via = rnd.choice([c for c in current if c[0] not in remove])[1]
            args = ["scale", "decommission", "--cluster", via, "--remove", ",".join(remove)]
        args += ["--strategy", strategy, "--window", a.window, "--parallel", str(a.parallel),
                 "--json"]
        errors_before = shared.error_count + sum(shared.bad_read_count.values())
        t_cycle = time.monotonic()
        what = f"{kind} of {count} node(s)"
        started_ids, start_s = None, None
        if etcd_nodes and kind == "commission":
            # No supervisor: the new nodes are started here, and joined before the command.
            t = time.monotonic()
            started_ids = etcd_nodes.start(count, via, cyc)
            start_s = round(time.monotonic() - t, 3)
            if started_ids is None:
                break
        report, wall = pliant.run(args, a.scale_timeout, what, cyc)
        if report is None:
            break
        rec = {"cycle": cyc, "kind": kind, "strategy": strategy, "count": count,
               "command": shlex.join([a.bin] + args),
               "nodes_before": report["nodes_before"], "nodes_after": report["nodes_after"],
               "added": report["added"], "removed": report["removed"],
               "planned_t_t": report["planned"]["t_t"], "planned_t_max": report["planned"]["t_max"],
               "seconds": report["seconds"], "bytes_moved": report["bytes_moved"],
               "keys_moved": report["keys_moved"], "moves": report["moves"],
               "planned_bytes": report["planned_bytes"],
               "bandwidth_bytes_per_s": report["bandwidth_bytes_per_s"],
               "command_wall_s": round(wall, 3), "report": report}
        pl = report["planned"]
        rec["planned_l_ratio"] = pl["l_max"] / pl["l_t"] if pl["l_t"] > 0 else None
        rec["planned_d_ratio"] = pl["d_max"] / pl["d_t"] if pl["d_t"] > 0 else None
        rec["seconds_over_t_t"] = report["seconds"] / pl["t_t"] if pl["t_t"] > 0 else None
        want_after = n + count if kind == "commission" else n - count
        if report["nodes_before"] != n or report["nodes_after"] != want_after:
            failures.append({"what": f"{what}: the report says {report['nodes_before']} → "
                             f"{report['nodes_after']} nodes, expected {n} → {want_after}",
                             "cycle": cyc})
        if kind == "commission" and len(report["added"]) != count:
            failures.append({"what": f"{what}: the report adds {report['added']}", "cycle": cyc})
        if kind == "decommission" and sorted(report["removed"]) != sorted(remove):
            failures.append({"what": f"{what}: the report removes {report['removed']}, asked "
                             f"for {remove}", "cycle": cyc})
        if etcd_nodes:
            rec["etcd"] = {"not_stopped_by_pliant": report.get("not_stopped")}
            if started_ids is not None:
                rec["etcd"]["started"], rec["etcd"]["start_s"] = started_ids, start_s
                if sorted(report["added"]) != sorted(started_ids):
                    failures.append({"what": f"{what}: the report adds {report['added']}, the "
                                     f"nodes started for it are {started_ids}", "cycle": cyc})
            if kind == "decommission":
                # No supervisor: `pliant scale` took them out of the map; their processes are
                # stopped here (by pid), as a supervisor's retire would.
                t = time.monotonic()
                rec["etcd"]["stop_detail"] = etcd_nodes.stop(report["removed"], via, cyc)
                rec["etcd"]["stopped"] = report["removed"]
                rec["etcd"]["stop_s"] = round(time.monotonic() - t, 3)

        # The map as the report says, as the node asked sees it. It learns the map by watch, a
        # moment after the rescale wrote it: polled (at most 15 s) until it shows the expected
        # owners and no slot migrating; how long that took is recorded.
        if kind == "commission":
            want_ids = {nid for nid, _ in current} | set(report["added"])
        else:
            want_ids = {nid for nid, _ in current} - set(remove)
        t_view, polls, first_version, st = time.monotonic(), 0, None, None
        while True:
            polls += 1
            st = pliant.status(via, "100ms", cyc, "pliant cluster status")
            if st is None:
                break
            if first_version is None:
                first_version = st["version"]
            ids = {o["id"] for o in owners(st)}
            settled = (st["slots_assigned"] == SLOTS and st["slots_migrating"] == 0
                       and ids == want_ids)
            if settled or time.monotonic() - t_view > 15:
                break
            time.sleep(0.2)
        if st is None:
            out["cycles"].append(dict(rec, measured={}, cycle_wall_s=time.monotonic() - t_cycle))
            break
        rec["view"] = {"settle_s": round(time.monotonic() - t_view, 3), "polls": polls,
                       "first_version": first_version, "version": st["version"],
                       "settled": settled}
        if not settled:
            failures.append({"what": f"{what}: 15 s after the rescale ended, {via} shows map "
                             f"version {st['version']} with {st['slots_assigned']} slots "
                             f"assigned, {st['slots_migrating']} migrating, owners "
                             f"{sorted(ids)}; expected {sorted(want_ids)}", "cycle": cyc})
        # The balance after the cycle, load running.
        st = pliant.status(via, "1s", cyc, "pliant cluster status") or st
        rec["measured"] = balance(st)
        rec["map_version"] = st["version"]
        own = owners(st)
        bad = [o for o in own if not o["reachable"] or not o["alive"] or o["keys"] is None]
        if bad:
            failures.append({"what": f"{what}: slot owners not alive or not reachable after the "
                             f"cycle: {bad}", "cycle": cyc})
        # Retired nodes' processes stop (at most 30 s).
        stay = []
        for nid in remove:
            t_end = time.monotonic() + 30
            while processes_with(f"--node-id {nid}") and time.monotonic() < t_end:
                time.sleep(0.2)
            stay += processes_with(f"--node-id {nid}")
        if stay:
            failures.append({"what": f"{what}: decommissioned nodes still run (pids {stay})",
                             "cycle": cyc})
        # Every node process of the cluster is a slot owner: none left over, none missing.
        procs = processes_with(f" --store {a.dir}/")  # node-<i> (and extra-<n>: --etcd)
        rec["node_processes"] = len(procs)
        if len(procs) != len(own):
            failures.append({"what": f"{what}: {len(procs)} node processes run (pids {procs}), "
                             f"{len(own)} nodes own slots", "cycle": cyc})
        current = [(o["id"], o["addr"]) for o in own]
        rec["cycle_wall_s"] = round(time.monotonic() - t_cycle, 3)
        new_errors = shared.error_count + sum(shared.bad_read_count.values()) - errors_before
        rec["client_errors_and_bad_reads"] = new_errors
        out["cycles"].append(rec)
        m = rec["measured"]
        log(f"cycle {cyc}/{a.cycles}: {kind} {'+' if kind == 'commission' else '-'}{count} "
            f"({strategy}) {rec['nodes_before']}→{rec['nodes_after']} nodes: {rec['moves']} "
            f"moves, {rec['keys_moved']} keys, {rec['bytes_moved'] / 1e6:.2f} MB in "
            f"{rec['seconds']:.2f} s (T_t {rec['planned_t_t']:.4f} s); measured D "
            f"{fmt(m['d_ratio_bytes'], '.3f')} L {fmt(m['l_ratio'], '.3f')}; "
            + (f"map seen late at {via} ({rec['view']['settle_s']:.1f} s); "
               if rec["view"]["polls"] > 1 else "")
            + (f"nodes started in {rec['etcd']['start_s']:.1f} s; " if "start_s" in
               rec.get("etcd", {}) else "")
            + (f"removed nodes stopped in {rec['etcd']['stop_s']:.1f} s; " if "stop_s" in
               rec.get("etcd", {}) else "")
            + f"cycle "
            f"{rec['cycle_wall_s']:.1f} s; writes {shared.writes}, reads {shared.reads}, "
            f"errors {shared.error_count}, bad reads {sum(shared.bad_read_count.values())}")

    # 4. The load stops; the cluster against the write log.
    shared.stop.set()
    for t in threads:
        t.join(timeout=60)
        if t.is_alive():
            failures.append({"what": f"load thread {t.name} did not stop within 60 s",
                             "cycle": shared.cycle})
    for tf in shared.thread_failures:
        failures.append({"what": f"load thread failed: {tf}", "cycle": shared.cycle})
    if shared.error_count:
        failures.append({"what": f"{shared.error_count} client errors {shared.error_types}; "
                         f"first: {json.dumps(shared.errors[:5])}", "cycle": shared.cycle})
    nbad = sum(shared.bad_read_count.values())
    if nbad:
        failures.append({"what": f"{nbad} wrong reads {shared.bad_read_count}; first: "
                         f"{json.dumps(shared.bad_reads[:5])}", "cycle": shared.cycle})
    if "before" in out["checks"]:
        startup = [tuple(addr.rsplit(":", 1)) for _, addr in current]
        out["checks"]["after"] = check_against_log(shared, pliant, startup, current[0][1],
                                                   "after the last cycle", shared.cycle,
                                                   failures, op_timeout)
        log(f"after: checksum equal {out['checks']['after'].get('checksum_equal')}, keys "
            f"{out['checks']['after'].get('status_keys_total')} of {a.keys}")
    if etcd_nodes:
        etcd_nodes.stop_all(shared.cycle)
        out["etcd_nodes"] = {"started": etcd_nodes.started, "stopped": etcd_nodes.stopped}
    if len(out["cycles"]) != a.cycles and not failures:
        failures.append({"what": f"{len(out['cycles'])} of {a.cycles} cycles ran",
                         "cycle": shared.cycle})
    out["client"] = {"writes": shared.writes, "reads": shared.reads,
                     "errors": shared.error_count, "error_types": shared.error_types,
                     "error_examples": shared.errors, "bad_reads": shared.bad_read_count,
                     "bad_read_examples": shared.bad_reads, "moved": shared.moved,
                     "ask_unknown": shared.ask_unknown,
                     "topology_refreshes": shared.refreshes,
                     "log_entries": sum(len(x) for x in shared.log_keys)}
    out["final_nodes"] = [{"id": i, "addr": ad} for i, ad in current]
    out["total_seconds"] = time.monotonic() - T0
    out["pass"] = not failures
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    print(summary_md(out), flush=True)
    for f in failures:
        log(f"FAIL (cycle {f.get('cycle')}): {f['what']}")
    return 1 if failures else 0


ETCD_NODES = None  # with --etcd: the node processes this driver starts and stops

if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        if ETCD_NODES is not None:  # an interrupt: no node started here is left running
            ETCD_NODES.stop_all(None)
