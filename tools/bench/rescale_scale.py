#!/usr/bin/env python3
"""Helpers of tools/bench/rescale_scale.sh (issue 34): the loader, the checker, the reader of
redis-benchmark's output and the summary. Standard library only (redis-py is not needed): a raw
RESP2 client that follows -MOVED and -ASK and retries -TRYAGAIN.

  load     KEYS keys `k:<i>` of VALUE bytes, every key to the master owning its slot (CRC16, the
           map from CLUSTER SLOTS), one `redis-cli --pipe` per master fed from here; every reply
           must be +OK (redis-cli's "errors: 0, replies: N" per master, summing to KEYS)
  verify   every `k:<i>` read back through the cluster with its value (pipelined per owner)
  checker  writes distinct keys `ck:<phase>:<i>` (all slots) with known values until SIGTERM,
           one at a time, following redirections; records each acknowledged one; then reads
           every acknowledged key back and counts lost (missing) and stale (another value)
  bench    reads the output of the `redis-benchmark -l` loops of one load run (full, not --csv)
           and merges its completed iterations: requests, ops/s, p50/p99
  summary  the markdown table and the JSON from the phases' records
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

SLOTS = 16384

# CRC16/XMODEM as Redis Cluster uses it (keyHashSlot).
_T = []
for _i in range(256):
    _c = _i << 8
    for _ in range(8):
        _c = ((_c << 1) ^ 0x1021) if _c & 0x8000 else (_c << 1)
    _T.append(_c & 0xFFFF)


def crc16(b):
    c = 0
    for x in b:
        c = ((c << 8) & 0xFF00) ^ _T[((c >> 8) ^ x) & 0xFF]
    return c


def slot(key):
    k = key.encode() if isinstance(key, str) else key
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % SLOTS


class Conn:
    """One RESP2 connection."""

    def __init__(self, addr, timeout=30.0):
        h, p = addr.rsplit(":", 1)
        self.addr = addr
        self.s = socket.create_connection((h, int(p)), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb", buffering=1 << 16)

    def close(self):
        try:
            self.f.close()
            self.s.close()
        except OSError:
            pass

    @staticmethod
    def enc(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def send(self, data):
        self.s.sendall(data)

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError(f"{self.addr}: connection closed")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            d = self.f.read(n + 2)
            return d[:-2]
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.read() for _ in range(n)]
        raise ConnectionError(f"{self.addr}: bad reply {line[:80]!r}")

    def call(self, *args):
        self.send(self.enc(*args))
        return self.read()


class RespError(str):
    pass


def cluster_slots(seed):
    """slot -> "host:port" of its master, from CLUSTER SLOTS of `seed`."""
    c = Conn(seed)
    try:
        r = c.call("CLUSTER", "SLOTS")
    finally:
        c.close()
    if isinstance(r, RespError):
        raise SystemExit(f"CLUSTER SLOTS at {seed}: {r}")
    owner = [None] * SLOTS
    for ent in r:
        a, b, master = ent[0], ent[1], ent[2]
        addr = f"{master[0].decode()}:{master[1]}"
        for s in range(a, b + 1):
            owner[s] = addr
    missing = sum(1 for o in owner if o is None)
    if missing:
        raise SystemExit(f"CLUSTER SLOTS at {seed}: {missing} slots unassigned")
    return owner


class Cluster:
    """A small cluster client: routes by CRC16 over a cached map, follows MOVED and ASK,
    retries TRYAGAIN (and a connection error) with a bounded back-off."""

    def __init__(self, seed):
        self.seed = seed
        self.conns = {}
        self.owner = cluster_slots(seed)
        self.moved = self.asked = self.tryagain = self.reconnects = 0

    def conn(self, addr):
        c = self.conns.get(addr)
        if c is None:
            c = self.conns[addr] = Conn(addr, timeout=30.0)
        return c

    def drop(self, addr):
        c = self.conns.pop(addr, None)
        if c:
            c.close()

    def call(self, key, *args, deadline_s=60.0):
        s = slot(key)
        addr = self.owner[s]
        asking = False
        end = time.monotonic() + deadline_s
        delay = 0.001
        while True:
            try:
                c = self.conn(addr)
                if asking:
                    c.send(Conn.enc("ASKING") + Conn.enc(*args))
                    a = c.read()
                    if isinstance(a, RespError):
                        raise RuntimeError(f"ASKING at {addr}: {a}")
                    r = c.read()
                else:
                    r = c.call(*args)
            except (OSError, ConnectionError) as e:
                # A node gone (a decommissioned one stops): read the map again from the seed,
                # as cluster clients refresh their topology on a connection error.
                self.drop(addr)
                self.reconnects += 1
                if time.monotonic() > end:
                    raise RuntimeError(f"{args[0]} {key} at {addr}: {e}") from e
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                asking = False
                try:
                    self.owner = cluster_slots(self.seed)
                except (OSError, ConnectionError, SystemExit):
                    pass
                addr = self.owner[s]
                continue
            asking = False
            if isinstance(r, RespError):
                if r.startswith("MOVED "):
                    self.moved += 1
                    addr = r.split()[2]
                    self.owner[s] = addr
                    continue
                if r.startswith("ASK "):
                    self.asked += 1
                    addr = r.split()[2]
                    asking = True
                    continue
                if r.startswith("TRYAGAIN") or r.startswith("CLUSTERDOWN"):
                    self.tryagain += 1
                    if time.monotonic() > end:
                        raise RuntimeError(f"{args[0]} {key}: still {r} after {deadline_s} s")
                    time.sleep(delay)
                    delay = min(delay * 2, 0.2)
                    addr = self.owner[s]
                    continue
                raise RuntimeError(f"{args[0]} {key} at {addr}: {r}")
            return r

    def close(self):
        for a in list(self.conns):
            self.drop(a)


# ---------------------------------------------------------------------------------------------
def cmd_load(a):
    owner = cluster_slots(a.seed)
    masters = sorted(set(owner))
    t0 = time.monotonic()
    procs, outs = {}, {}
    for m in masters:
        h, p = m.rsplit(":", 1)
        outs[m] = open(os.path.join(a.tmp, f"pipe-{p}.out"), "w+")
        procs[m] = subprocess.Popen(["redis-cli", "-h", h, "-p", p, "--pipe",
                                     "--pipe-timeout", "120"],
                                    stdin=subprocess.PIPE, stdout=outs[m],
                                    stderr=subprocess.STDOUT)
    sent = {m: 0 for m in masters}
    bufs = {m: [] for m in masters}
    pad = b"v" * a.value
    vlen = b"$%d\r\n" % a.value
    per_flush = max(1, (1 << 20) // (a.value + 64))
    try:
        for i in range(a.keys):
            k = b"%s%d" % (a.prefix.encode(), i)
            m = owner[crc16(k) % SLOTS]
            v = (k + b"|" + pad)[:a.value] if a.value > len(k) else k + b"|"
            if a.value > len(k):
                cmd = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n%s%s\r\n" % (len(k), k, vlen, v)
            else:
                cmd = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v)
            b = bufs[m]
            b.append(cmd)
            sent[m] += 1
            if len(b) >= per_flush:
                procs[m].stdin.write(b"".join(b))
                b.clear()
        for m in masters:
            if bufs[m]:
                procs[m].stdin.write(b"".join(bufs[m]))
            procs[m].stdin.close()
    except BrokenPipeError:
        pass
    ok, per = True, {}
    for m in masters:
        try:
            rc = procs[m].wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            procs[m].kill()
            procs[m].wait()
            rc = "timeout"
        outs[m].seek(0)
        text = outs[m].read()
        mm = re.search(r"errors: (\d+), replies: (\d+)", text)
        errors, replies = (int(mm.group(1)), int(mm.group(2))) if mm else (None, None)
        per[m] = {"sent": sent[m], "errors": errors, "replies": replies, "rc": rc}
        if rc != 0 or errors != 0 or replies != sent[m]:
            ok = False
            print(f"rescale_scale.py load: {m}: sent {sent[m]}, redis-cli --pipe: rc {rc}: "
                  f"{text.strip()[-500:]}", file=sys.stderr)
    secs = time.monotonic() - t0
    out = {"keys": a.keys, "value_bytes": a.value, "seconds": secs, "masters": per,
           "acknowledged": sum(p["replies"] or 0 for p in per.values()), "ok": ok}
    print(json.dumps(out))
    return 0 if ok else 1


def cmd_verify(a):
    """Every `prefix<i>` with its value, pipelined per owner (a MOVED key retried alone)."""
    cl = Cluster(a.seed)
    by = {}
    for i in range(a.keys):
        k = b"%s%d" % (a.prefix.encode(), i)
        by.setdefault(cl.owner[crc16(k) % SLOTS], []).append(k)
    missing = wrong = redirected = 0
    examples = []
    t0 = time.monotonic()
    pad = b"v" * a.value
    for m, keys in by.items():
        c = cl.conn(m)
        for j in range(0, len(keys), 500):
            chunk = keys[j:j + 500]
            c.send(b"".join(Conn.enc("GET", k) for k in chunk))
            for k in chunk:
                r = c.read()
                if isinstance(r, RespError):
                    redirected += 1
                    r = cl.call(k.decode(), "GET", k)
                want = (k + b"|" + pad)[:a.value] if a.value > len(k) else k + b"|"
                if r is None:
                    missing += 1
                    if len(examples) < 5:
                        examples.append(f"{k.decode()}: missing")
                elif r != want:
                    wrong += 1
                    if len(examples) < 5:
                        examples.append(f"{k.decode()}: {len(r)} bytes, not its value")
    cl.close()
    out = {"keys": a.keys, "missing": missing, "wrong": wrong, "redirected": redirected,
           "seconds": time.monotonic() - t0, "examples": examples}
    print(json.dumps(out))
    return 0


def cmd_checker(a):
    """Write ck:<phase>:<i> twice (<phase>:<i>:1, then :2) until SIGTERM (or --seconds), then
    read every acknowledged key back: missing is lost, another value is stale."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cl = Cluster(a.seed)
    acked = {}
    errors = []
    sent = 0
    t0 = time.monotonic()
    i = 0
    # Ready: the driver starts the move once this line is there.
    print("ready", file=sys.stderr, flush=True)
    while not stop.is_set():
        if a.seconds and time.monotonic() - t0 > a.seconds:
            break
        # Each key is written twice (the second value must win): a stale read would show the first.
        k = f"ck:{a.phase}:{i}"
        try:
            for n in (1, 2):
                v = f"{a.phase}:{i}:{n}:" + "c" * 64
                sent += 1
                r = cl.call(k, "SET", k, v)
                if r != "OK":
                    raise RuntimeError(f"SET {k}: {r!r}")
                acked[k] = v
        except RuntimeError as e:
            errors.append(str(e))
            if len(errors) > 1000:
                break
        i += 1
        if a.rate:
            time.sleep(1.0 / a.rate)
    write_s = time.monotonic() - t0
    # The driver stops the writes once the move has ended: read everything back.
    moved, asked, tryagain, reconnects = cl.moved, cl.asked, cl.tryagain, cl.reconnects
    cl.close()
    cl = Cluster(a.seed)
    lost = stale = 0
    examples = []
    for k, v in acked.items():
        try:
            r = cl.call(k, "GET", k)
        except RuntimeError as e:
            errors.append(f"read back: {e}")
            lost += 1
            continue
        if r is None:
            lost += 1
            if len(examples) < 5:
                examples.append(f"{k}: lost")
        elif r.decode() != v:
            stale += 1
            if len(examples) < 5:
                examples.append(f"{k}: {r[:40]!r} not {v[:40]!r}")
    out = {"phase": a.phase, "keys_written": i, "sets_sent": sent, "acknowledged_keys": len(acked),
           "write_seconds": write_s, "lost": lost, "stale": stale, "errors": len(errors),
           "first_errors": errors[:5], "examples": examples, "moved": moved,
           "asked": asked, "tryagain": tryagain,
           "reconnects": reconnects}
    print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------------------------
def parse_bench(path):
    """The completed iterations of a `redis-benchmark -l` output: each has requests, seconds and
    its latency points (latency ms, cumulative count) from both distributions it prints."""
    text = open(path, errors="replace").read().replace("\r", "\n")
    its = []
    for block in re.split(r"^====== ", text, flags=re.M)[1:]:
        m = re.search(r"(\d+) requests completed in ([\d.]+) seconds", block)
        if not m or "Cumulative distribution of latencies" not in block:
            continue
        # The summary after the distribution closes an iteration; a killed one lacks it.
        if not re.search(r"throughput summary:", block):
            continue
        pts = [(float(x), int(c)) for x, c in re.findall(
            r"<= ([\d.]+) milliseconds \(cumulative count (\d+)\)", block)]
        its.append({"requests": int(m.group(1)), "seconds": float(m.group(2)), "points": pts})
    errors = len(re.findall(r"^Error from server", text, flags=re.M))
    refetch = len(re.findall(r"^WARNING: Cluster slots configuration changed", text, flags=re.M))
    return its, errors, refetch


def _cdf(points, x):
    """An iteration's cumulative count at latency x: linear between the points it printed
    (from (0, 0)), its total beyond the last."""
    px, pc = 0.0, 0
    for lx, c in points:
        if x < lx:
            return pc + (c - pc) * (x - px) / (lx - px) if lx > px else pc
        px, pc = lx, max(pc, c)
    return pc


def merged_percentile(its, q):
    """The q-quantile of all requests of `its` together: the latency at which the iterations'
    cumulative counts, summed, reach q of all requests (each count interpolated linearly
    between the points its iteration printed: both of its distributions, percentile and
    latency), found by bisection."""
    total = sum(i["requests"] for i in its)
    if not total:
        return None
    pts = [sorted(i["points"]) for i in its]
    need = q * total
    lo, hi = 0.0, max(x for p in pts for x, _ in p)
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(_cdf(p, mid) for p in pts) >= need:
            hi = mid
        else:
            lo = mid
    return hi


def cmd_bench(a):
    out = {"span_seconds": a.span, "procs": {}}
    allits = []
    total_req = 0
    errs = refs = 0
    for spec in a.files:
        name, path = spec.split("=", 1)
        its, e, r = parse_bench(path)
        req = sum(i["requests"] for i in its)
        busy = sum(i["seconds"] for i in its)
        out["procs"][name] = {"iterations": len(its), "requests": req,
                              "seconds_in_iterations": busy,
                              "ops_per_s": req / busy if busy else None,
                              "errors": e, "map_refetches": r}
        allits += its
        total_req += req
        errs += e
        refs += r
    # ops/s: every completed iteration's requests, each process's own rate, summed.
    out["ops_per_s"] = sum(p["ops_per_s"] or 0 for p in out["procs"].values())
    out["requests"] = total_req
    out["p50_ms"] = merged_percentile(allits, 0.50)
    out["p99_ms"] = merged_percentile(allits, 0.99)
    # The tail beyond p99: a stall of seconds shows here (and in ops/s), not in p99.
    out["p999_ms"] = merged_percentile(allits, 0.999)
    out["max_ms"] = max((x for i in allits for x, _ in i["points"]), default=None)
    out["errors"] = errs
    out["map_refetches"] = refs
    print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------------------------
def fmt(x, spec=",.2f", none="–"):
    return none if x is None else format(x, spec)


def cmd_summary(a):
    rec = json.load(open(a.records))
    rows = rec["phases"]
    print(f"pliant {rec['pliant']} vs Redis Cluster {rec.get('redis') or '(not run)'}; "
          f"{rec['keys']:,} keys of {rec['value']:,} bytes ({rec['keys'] * rec['value'] / 2**30:.2f} GiB "
          f"of values) over 3 nodes, persistence: {rec['persistence']}; load: redis-benchmark "
          f"--cluster, {rec['get_clients']} clients GET + {rec['set_clients']} clients SET, -d {rec['value']}")
    print()
    print("| system | phase | duration (report) | wall | bytes moved | keys moved | T_t | duration / T_t "
          "| servers' CPU s (µs a key) "
          "| load ops/s during / without | p50 ms during / without | p99 ms during / without "
          "| p99 ratio | p99.9 ms during / without | max ms during / without | checker acked | lost | stale |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ld, lb, ck = r.get("load_during"), r.get("load_without"), r.get("checker")
        def pair(key, spec):
            if not ld:
                return ""
            return f"{fmt(ld.get(key), spec)} / {fmt(lb.get(key) if lb else None, spec)}"
        p99r = (ld["p99_ms"] / lb["p99_ms"]) if ld and lb and ld.get("p99_ms") and lb.get("p99_ms") else None
        att = f" ({r['attempts']} attempts)" if r.get("attempts", 1) > 1 else ""
        if r.get("failed"):
            att = f" (FAILED, {r['attempts']} attempts)"
        print(f"| {r['system']} | {r['phase']}{att} | {fmt(r.get('seconds'))} s | {fmt(r.get('wall_seconds'))} s "
              f"| {fmt(r.get('bytes_moved'), ',.0f')} | {fmt(r.get('keys_moved'), ',.0f')} "
              f"| {fmt(r.get('t_t'), ',.3f')} s | {fmt(r.get('duration_over_t_t'), ',.1f')} "
              f"| {fmt(r.get('cpu_seconds'), '.2f')} ({fmt(r.get('cpu_us_per_key'), '.1f')}) "
              f"| {pair('ops_per_s', ',.0f')} | {pair('p50_ms', '.3f')} | {pair('p99_ms', '.3f')} "
              f"| {fmt(p99r, '.2f', '')} | {pair('p999_ms', ',.1f')} | {pair('max_ms', ',.0f')} "
              f"| {fmt(ck['acknowledged_keys'], ',') if ck else ''} "
              f"| {ck['lost'] if ck else ''} | {ck['stale'] if ck else ''} |")
    for r in rows:
        if r["system"] == "pliant" and r["phase"].startswith("idle") and r.get("redis_seconds"):
            print(f"\n{r['phase']}: pliant {r['seconds']:.2f} s, Redis {r['redis_seconds']:.2f} s: "
                  f"pliant / Redis = {r['seconds'] / r['redis_seconds']:.2f}")
    for r in rows:
        for f in r.get("failed_attempts", []):
            print(f"\n{r['system']} {r['phase']}: FAILED {f}")
    v = rec.get("verify")
    if v:
        print(f"\nevery loaded key read back at the end: {v['keys'] - v['missing'] - v['wrong']:,} of "
              f"{v['keys']:,} (missing {v['missing']}, wrong {v['wrong']})")
    for n in rec.get("notes", []):
        print(f"- {n}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("load")
    p.add_argument("--seed", required=True)
    p.add_argument("--keys", type=int, required=True)
    p.add_argument("--value", type=int, required=True)
    p.add_argument("--prefix", default="k:")
    p.add_argument("--tmp", required=True)
    p.add_argument("--timeout", type=float, default=1800)
    p = sub.add_parser("verify")
    p.add_argument("--seed", required=True)
    p.add_argument("--keys", type=int, required=True)
    p.add_argument("--value", type=int, required=True)
    p.add_argument("--prefix", default="k:")
    p = sub.add_parser("checker")
    p.add_argument("--seed", required=True)
    p.add_argument("--phase", required=True)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--rate", type=float, default=0)
    p = sub.add_parser("bench")
    p.add_argument("--span", type=float, default=0)
    p.add_argument("files", nargs="+")
    p = sub.add_parser("summary")
    p.add_argument("records")
    a = ap.parse_args()
    sys.exit({"load": cmd_load, "verify": cmd_verify, "checker": cmd_checker,
              "bench": cmd_bench, "summary": cmd_summary}[a.cmd](a))


if __name__ == "__main__":
    main()
