#!/usr/bin/env python3
"""The client side of tools/bench/durability.sh (python3 standard library only; RESP by hand).

  write   W connections write SETs of distinct keys (some keys written again with a new value),
          pipelined in random batches of 1..32, each reply timed when it arrives; once MIN_ACKED
          writes are acknowledged a ready file appears; writing goes on until the node dies (the
          wrapper's SIGKILL) or a deadline passes. Then every write sent, acknowledged or not,
          goes to a JSON state file.
  verify  After the restart: GETs every key written (pipelined), DBSIZE, and compares with the
          state file and the kill time; one JSON result.
  table   The markdown table of the results, the reasons of any failure; exit 1 if any failed.

A value is derived from its key and version (`value()`), so the verifier knows every value a key
may hold: the last acknowledged one, an older acknowledged one (a lost overwrite), or one sent
but never acknowledged (in flight at the kill).
"""

import argparse
import hashlib
import json
import os
import random
import socket
import sys
import threading
import time

MAX_BATCH = 32
OVERWRITE_P = 0.15


# Extra bytes in every value (durability.sh --value-pad), the same for the writers and the
# verifier since both read it from the environment.
PAD = int(os.environ.get("DURABILITY_VALUE_PAD", "0"))


def value(key: str, ver: int) -> bytes:
    h = hashlib.blake2b(f"{key}/{ver}".encode(), digest_size=16).hexdigest()
    filler = (h * 8)[: 8 + int(h[:4], 16) % 120]
    pad = (h * (PAD // len(h) + 1))[:PAD]
    return f"{key}|v{ver}|{filler}{pad}".encode()


def command(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A RESP2 connection: send bytes, read replies one at a time."""

    def __init__(self, port: int, timeout: float):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("connection closed by the node")
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos : i])
                self.pos = i + 2
                return line
            self._fill()

    def reply(self):
        """One reply: ('+', text), ('-', text), (':', int) or ('$', bytes|None)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return kind.decode(), rest.decode(errors="replace")
        if kind == b":":
            return ":", int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return "$", None
            while len(self.buf) - self.pos < n + 2:
                self._fill()
            data = bytes(self.buf[self.pos : self.pos + n])
            self.pos += n + 2
            return "$", data
        raise ValueError(f"unexpected reply {line[:80]!r}")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------- write


class Writer(threading.Thread):
    def __init__(self, idx, port, seed, deadline, max_writes, timeout):
        super().__init__(daemon=True)
        self.idx = idx
        self.port = port
        self.rng = random.Random(seed)
        self.deadline = deadline
        self.max_writes = max_writes
        self.timeout = timeout
        self.ops = []  # [key, version, ack time or None], in the order sent
        self.acked = 0
        self.errors = []  # error replies to a SET
        self.end = None  # why writing stopped
        self.end_t = None
        self.stop = False

    def run(self):
        try:
            conn = Conn(self.port, self.timeout)
        except OSError as e:
            self.end, self.end_t = f"connect failed: {e}", time.time()
            return
        acked_keys = []  # keys whose latest version was acknowledged
        latest = {}  # key -> latest version sent
        next_key = 0
        try:
            while True:
                if self.stop:
                    self.end = "stopped"
                    break
                if time.time() > self.deadline or len(self.ops) >= self.max_writes:
                    self.end = "deadline (never killed)"
                    break
                n = self.rng.randint(1, MAX_BATCH)
                batch, in_batch = [], set()
                for _ in range(n):
                    key = None
                    if acked_keys and self.rng.random() < OVERWRITE_P:
                        k = acked_keys[self.rng.randrange(len(acked_keys))]
                        if k not in in_batch:
                            key = k
                    if key is None:
                        key = f"dur:{self.idx}:{next_key:09d}"
                        next_key += 1
                    ver = latest.get(key, 0) + 1
                    latest[key] = ver
                    in_batch.add(key)
                    op = [key, ver, None]
                    self.ops.append(op)
                    batch.append(op)
                conn.send(b"".join(command(b"SET", k.encode(), value(k, v)) for k, v, _ in batch))
                for op in batch:
                    kind, text = conn.reply()
                    t = time.time()
                    if kind == "+" and text == "OK":
                        op[2] = t
                        self.acked += 1
                        if op[1] == 1:
                            acked_keys.append(op[0])
                    else:
                        self.errors.append(f"{op[0]} v{op[1]}: {kind}{text}")
        except (OSError, ConnectionError) as e:
            self.end = f"connection lost: {type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            self.end = f"client error: {type(e).__name__}: {e}"
        self.end_t = time.time()
        conn.close()


def cmd_write(a):
    t0 = time.time()
    deadline = t0 + a.max_seconds
    writers = [
        Writer(i, a.port, a.seed * 1000 + i, deadline, a.max_writes, a.timeout)
        for i in range(a.writers)
    ]
    for w in writers:
        w.start()
    ready_at = None
    while any(w.is_alive() for w in writers):
        if ready_at is None:
            acked = sum(w.acked for w in writers)
            if acked >= a.min_acked:
                ready_at = time.time()
                tmp = a.ready + ".tmp"
                with open(tmp, "w") as f:
                    f.write(f"{acked} {ready_at:.6f}\n")
                os.rename(tmp, a.ready)
        time.sleep(0.002)
        if time.time() > deadline + a.timeout + 5:
            for w in writers:
                w.stop = True
            break
    for w in writers:
        w.join(a.timeout + 5)
    state = {
        "t0": t0,
        "ready_at": ready_at,
        "writers": [
            {"ops": w.ops, "errors": w.errors[:20], "n_errors": len(w.errors),
             "end": w.end or "still running", "end_t": w.end_t}
            for w in writers
        ],
    }
    with open(a.state, "w") as f:
        json.dump(state, f)
    print(f"write: {sum(w.acked for w in writers)} acknowledged of {sum(len(w.ops) for w in writers)} sent; "
          + "; ".join(f"conn {w.idx}: {w.end}" for w in writers), file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------- verify


def cmd_verify(a):
    with open(a.state) as f:
        state = json.load(f)
    t_kill = float(a.kill_time)
    # key -> list of (version, ack time or None), in version order (one connection owns a key and
    # waits for a batch's replies before the next, so versions are sent and acknowledged in order)
    keys = {}
    acked_writes = overwrites = inflight = 0
    notes = []
    n_errors = 0
    for w in state["writers"]:
        n_errors += w["n_errors"]
        if w["n_errors"]:
            notes.append(f"{w['n_errors']} error replies to SET, e.g. {w['errors'][0]}")
        end = w["end"]
        if not end.startswith("connection lost"):
            notes.append(f"a writer ended with '{end}', not by the kill")
        elif w["end_t"] is not None and w["end_t"] < t_kill - 0.05:
            notes.append(f"a writer's connection was lost {t_kill - w['end_t']:.3f} s before the kill: {end}")
        for key, ver, ack in w["ops"]:
            keys.setdefault(key, []).append((ver, ack))
            if ack is not None:
                acked_writes += 1
                overwrites += ver > 1
            else:
                inflight += 1
    ack_after_kill = sum(
        1 for vs in keys.values() for _, ack in vs if ack is not None and ack > t_kill + 0.05
    )
    if ack_after_kill:
        notes.append(f"{ack_after_kill} acknowledgements timed after the kill (clock?)")

    conn = Conn(a.port, a.timeout)
    names = list(keys)
    got = {}
    step = 500
    for i in range(0, len(names), step):
        chunk = names[i : i + step]
        conn.send(b"".join(command(b"GET", k.encode()) for k in chunk))
        for k in chunk:
            kind, data = conn.reply()
            if kind != "$":
                raise SystemExit(f"verify: GET {k}: unexpected reply {kind}{data}")
            got[k] = data
    conn.send(command(b"DBSIZE"))
    kind, dbsize = conn.reply()
    conn.close()

    lost = lost_keys = wrong = inflight_found = found = 0
    oldest_lost_ack = None
    wrong_examples = []
    for key, vs in keys.items():
        data = got[key]
        acked_vers = [v for v, ack in vs if ack is not None]
        last_acked = max(acked_vers, default=0)
        if data is None:
            j = 0
        else:
            found += 1
            j = next((v for v, _ in vs if value(key, v) == data), None)
            if j is None:
                wrong += 1
                if len(wrong_examples) < 3:
                    wrong_examples.append(f"{key}: read {data[:60]!r}")
                continue
        if j > last_acked:
            inflight_found += 1  # a write in flight at the kill made it
        elif j < last_acked:
            lost_keys += 1
            lost += sum(1 for v in acked_vers if v > j)
            first_lost_ack = next(ack for v, ack in vs if v == j + 1)
            if first_lost_ack is None:  # cannot happen: versions are acknowledged in order
                notes.append(f"{key}: version {j + 1} lost but unacknowledged while a later one was")
                continue
            if oldest_lost_ack is None or first_lost_ack < oldest_lost_ack:
                oldest_lost_ack = first_lost_ack
    if wrong_examples:
        notes.append("wrong values: " + "; ".join(wrong_examples))
    dbsize_ok = kind == ":" and dbsize == found
    if not dbsize_ok:
        notes.append(f"DBSIZE {dbsize} but {found} of the keys written are there")

    span = (t_kill - oldest_lost_ack) if oldest_lost_ack is not None else None
    acked_at_ready = None
    if state["ready_at"] is not None:
        acked_at_ready = sum(
            1 for vs in keys.values() for _, ack in vs if ack is not None and ack <= state["ready_at"]
        )
    fails = []
    if wrong:
        fails.append(f"{wrong} wrong values")
    if not dbsize_ok:
        fails.append("DBSIZE differs from the number of written keys read back")
    if n_errors:
        fails.append("error replies to SET")
    if acked_writes < a.min_acked:
        fails.append(f"only {acked_writes} acknowledged writes (< {a.min_acked})")
    if a.mode == "always" and lost:
        fails.append(f"{lost} acknowledged writes lost under always")
    if a.mode == "everysec" and span is not None and span > a.max_span:
        fails.append(f"loss spans {span:.3f} s > {a.max_span} s")
    if any("not by the kill" in n or "before the kill" in n for n in notes):
        fails.append("the writers were not killed mid-stream")
    result = {
        "mode": a.mode,
        "run": a.run,
        "seed": a.seed,
        "kill_after_ready_s": t_kill - state["ready_at"] if state["ready_at"] else None,
        "acked_writes": acked_writes,
        "overwrites_acked": overwrites,
        "keys": len(keys),
        "lost": lost,
        "lost_keys": lost_keys,
        "wrong": wrong,
        "inflight": inflight,
        "inflight_found": inflight_found,
        "span_s": span,
        "dbsize": dbsize,
        "found": found,
        "restart_s": a.restart_s,
        "notes": notes,
        "fails": fails,
        "pass": not fails,
    }
    with open(a.out, "w") as f:
        json.dump(result, f)
    print(f"verify: {a.mode} #{a.run}: {acked_writes} acknowledged, {lost} lost, {wrong} wrong, "
          f"{inflight_found}/{inflight} in flight found"
          + (f", loss span {span:.3f} s" if span is not None else "")
          + ("; FAIL: " + ", ".join(fails) if fails else ""), file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------- table


def cmd_table(a):
    results = []
    for p in a.results:
        with open(p) as f:
            results.append(json.load(f))
    print("| mode | kill point | killed after | acknowledged writes (overwrites) | lost | wrong "
          "| in-flight found | span of loss | restart | result |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        span = "—" if r["span_s"] is None else f"{r['span_s']:.3f} s"
        after = "?" if r["kill_after_ready_s"] is None else f"+{r['kill_after_ready_s']:.2f} s"
        lost = str(r["lost"]) + (f" ({r['lost_keys']} keys)" if r["lost"] else "")
        print(f"| {r['mode']} | {r['run']} | {after} | {r['acked_writes']:,} ({r['overwrites_acked']:,}) "
              f"| {lost} | {r['wrong']} | {r['inflight_found']} of {r['inflight']} "
              f"| {span} | {r['restart_s']:.2f} s | {'ok' if r['pass'] else 'FAIL'} |")
    bad = False
    for r in results:
        for n in r["notes"]:
            print(f"- note, {r['mode']} kill point {r['run']}: {n}")
        for x in r["fails"]:
            bad = True
            print(f"- FAIL, {r['mode']} kill point {r['run']}: {x}")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--state", required=True)
    w.add_argument("--ready", required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--writers", type=int, default=2)
    w.add_argument("--min-acked", type=int, default=10000)
    w.add_argument("--max-seconds", type=float, default=120)
    w.add_argument("--max-writes", type=int, default=5_000_000)
    w.add_argument("--timeout", type=float, default=30)
    v = sub.add_parser("verify")
    v.add_argument("--port", type=int, required=True)
    v.add_argument("--state", required=True)
    v.add_argument("--kill-time", required=True)
    v.add_argument("--mode", required=True)
    v.add_argument("--run", type=int, required=True)
    v.add_argument("--seed", type=int, required=True)
    v.add_argument("--min-acked", type=int, default=10000)
    v.add_argument("--max-span", type=float, default=2.0)
    v.add_argument("--restart-s", type=float, required=True)
    v.add_argument("--out", required=True)
    v.add_argument("--timeout", type=float, default=60)
    t = sub.add_parser("table")
    t.add_argument("results", nargs="*")
    a = p.parse_args()
    return {"write": cmd_write, "verify": cmd_verify, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
