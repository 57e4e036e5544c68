#!/usr/bin/env python3
"""Helpers for tools/bench/fs_striped.sh (standard library only).

The data written and checked: byte OFFSET of a file with seed SEED is byte OFFSET % P of a
buffer of P = 1,048,573 (a prime, so no stripe, page or block boundary lines up with it)
pseudo-random bytes drawn from SEED. Every writer of a file writes the bytes of its range,
so a piece written at the wrong offset, or not at all, or another writer's piece, shows.

  fs_striped.py write FILE OFFSET LENGTH BS SEED [fsync]
        os.pwrite of the file's bytes OFFSET..OFFSET+LENGTH in pieces of BS bytes (the file is
        created, never truncated); with "fsync", os.fsync at the end. Prints the seconds taken.
  fs_striped.py check FILE LENGTH SEED
        reads the whole file and compares it with the expected LENGTH bytes: prints
        "MISMATCHED_BYTES FIRST_BAD_OFFSET SIZE" (-1: none; a size other than LENGTH counts
        the missing or extra bytes as mismatched). An I/O error prints "-1 ERRNO_NAME SIZE".
  fs_striped.py many write|check DIR FIRST COUNT SIZE
        files DIR/many-K for K in FIRST..FIRST+COUNT-1, SIZE bytes each, every byte of file K
        being K % 251 + 1, written in 1 MiB writes; "check" prints "BAD_FILES FIRST_BAD"
        (FIRST_BAD: "name:size" of the first that differs, or -).
  fs_striped.py sha LENGTH SEED
        the sha256 of the expected LENGTH bytes.
  fs_striped.py eio FILE STRIPE PID
        opens FILE, stops process PID (SIGSTOP: a cache server that does not answer), reads
        4 KiB at the start of each of the first 3 stripes of STRIPE bytes, timing each, then
        continues PID (SIGCONT) and reads them again. Prints JSON:
        {"stopped": [[stripe, "ok"|errno name, seconds], ...], "after": [...]}.
  fs_striped.py warm FILE STRIPE THREADS
        THREADS readers at once, each reading 4 KiB at the start of every stripe of FILE 10
        times: a mount then holds several connections to every server, as a busy job's would.
  fs_striped.py probe FILE STRIPE
        opens FILE (up to 20 tries) and reads 4 KiB at the start of every stripe once; prints
        "FAILED_OPENS FAILED_READS" (each failure an error the application saw, EIO or other).
  fs_striped.py resp HOST:PORT
        a raw-socket RESP client without the secret: sends every FS.* command, PING, and
        AUTH with a wrong secret; prints JSON {command: reply}.
  fs_striped.py stats SECRET_FILE HOST:PORT...
        the servers' counters (AUTH with the secret, then FS.STATS), summed:
        "DIRTY_BYTES WRITEBACK_BYTES USED_BYTES" (`pliant fs stat` of a striped mount shows
        the mount's own, empty, cache).
  fs_striped.py fio JSON
        fio's --output-format=json of one or more jobs: "BYTES RUNTIME_MS MBPS CPU_S" (bytes
        written by all jobs; the longest job's runtime: the write phase; bytes / that runtime;
        the jobs' user+sys CPU seconds).
  fs_striped.py proc PID...
        user+sys CPU seconds of the processes so far (/proc/PID/stat; a gone PID counts 0).
  fs_striped.py cpu
        "BUSY_SECONDS TOTAL_SECONDS" of the whole machine so far (/proc/stat, all CPUs).
  fs_striped.py report ROWS KV JSON_OUT
        ROWS: lines "check<TAB>result<TAB>numbers"; KV: lines "key<TAB>value". Prints the
        markdown table (rows sorted by check); writes {"rows": [...], "values": {...}} to JSON_OUT ("-": none).
"""

import errno
import hashlib
import json
import os
import random
import signal
import socket
import sys
import time

P = 1_048_573
CHUNK = 1 << 20


def base(seed):
    b = random.Random(int(seed)).randbytes(P)
    return b + b  # a slice of up to P bytes from any start, without wrapping


def expected(buf, offset, n):
    out = bytearray()
    while n > 0:
        s = offset % P
        m = min(n, P)
        out += buf[s:s + m]
        offset += m
        n -= m
    return bytes(out)


def write(path, offset, length, bs, seed, sync=""):
    buf = base(seed)
    offset, length, bs = int(offset), int(length), int(bs)
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        at, end = offset, offset + length
        while at < end:
            n = min(bs, end - at)
            data = expected(buf, at, n)
            done = 0
            while done < n:
                done += os.pwrite(fd, data[done:], at + done)
            at += n
        if sync == "fsync":
            os.fsync(fd)
    finally:
        os.close(fd)
    print(f"{time.monotonic() - t0:.3f}")


def check(path, length, seed):
    buf = base(seed)
    length = int(length)
    bad, first, size = 0, -1, 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        print(f"-1 {errno.errorcode.get(e.errno, e.errno)} 0")
        return
    try:
        at = 0
        while True:
            try:
                got = os.pread(fd, CHUNK, at)
            except OSError as e:
                print(f"-1 {errno.errorcode.get(e.errno, e.errno)} {at}")
                return
            if not got:
                break
            want = expected(buf, at, min(len(got), max(length - at, 0)))
            if got[:len(want)] != want:
                for i, (a, b) in enumerate(zip(got, want)):
                    if a != b:
                        bad += 1
                        if first < 0:
                            first = at + i
            if len(got) > len(want):  # past the expected end
                bad += len(got) - len(want)
                if first < 0:
                    first = at + len(want)
            at += len(got)
        size = at
    finally:
        os.close(fd)
    if size < length:
        bad += length - size
        if first < 0:
            first = size
    print(f"{bad} {first} {size}")


def many(what, d, first, count, size):
    first, count, size = int(first), int(count), int(size)
    bad, first_bad = 0, "-"
    for k in range(first, first + count):
        want = bytes([k % 251 + 1]) * size
        path = f"{d}/many-{k}"
        if what == "write":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                for at in range(0, size, CHUNK):
                    os.pwrite(fd, want[at:at + CHUNK], at)
            finally:
                os.close(fd)
        else:
            try:
                with open(path, "rb") as f:
                    got = f.read()
            except OSError as e:
                got = str(e).encode()
            if got != want:
                bad += 1
                if first_bad == "-":
                    first_bad = f"many-{k}:{len(got)}"
    if what == "check":
        print(bad, first_bad)


def sha(length, seed):
    buf = base(seed)
    h = hashlib.sha256()
    at, length = 0, int(length)
    while at < length:
        n = min(CHUNK, length - at)
        h.update(expected(buf, at, n))
        at += n
    print(h.hexdigest())


def eio(path, stripe, pid):
    stripe, pid = int(stripe), int(pid)
    fd = os.open(path, os.O_RDONLY)

    def reads():
        out = []
        for i in range(3):
            t0 = time.monotonic()
            try:
                os.pread(fd, 4096, i * stripe)
                what = "ok"
            except OSError as e:
                what = errno.errorcode.get(e.errno, str(e.errno))
            out.append([i, what, round(time.monotonic() - t0, 3)])
        return out

    try:
        os.kill(pid, signal.SIGSTOP)
        try:
            stopped = reads()
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.5)
        after = reads()
    finally:
        os.close(fd)
    print(json.dumps({"stopped": stopped, "after": after}))


def warm(path, stripe, threads):
    import threading
    stripe = int(stripe)
    size = os.stat(path).st_size

    def reader():
        fd = os.open(path, os.O_RDONLY)
        try:
            for _ in range(10):
                for at in range(0, size, stripe):
                    os.pread(fd, 4096, at)
        finally:
            os.close(fd)

    ts = [threading.Thread(target=reader) for _ in range(int(threads))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def probe(path, stripe):
    stripe = int(stripe)
    opens = reads = 0
    fd = None
    for _ in range(20):
        try:
            fd = os.open(path, os.O_RDONLY)
            break
        except OSError:
            opens += 1
    if fd is None:
        print(opens, -1)
        return
    try:
        size = os.fstat(fd).st_size
        for at in range(0, size, stripe):
            try:
                os.pread(fd, 4096, at)
            except OSError:
                reads += 1
    finally:
        os.close(fd)
    print(opens, reads)


def command(sock, f, args):
    """Sends one RESP command; returns the reply's first line, and a bulk reply's data."""
    msg = f"*{len(args)}\r\n".encode()
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        msg += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(msg)
    line = f.readline().decode(errors="replace").rstrip("\r\n")
    body = None
    if line.startswith("$") and line != "$-1":
        body = f.read(int(line[1:]) + 2)[:-2]
    return line, body


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    return s, s.makefile("rb")


def resp(addr):
    who = ["0", "0", "0"]  # claims to be root
    cmds = {
        "PING": ["PING"],
        "FS.READ": ["FS.READ", *who, "shared.dat", "1", "0", "4096"],
        "FS.WRITE": ["FS.WRITE", *who, "shared.dat", "1", "0", "x" * 100],
        "FS.SIZE": ["FS.SIZE", *who, "shared.dat"],
        "FS.FSYNC": ["FS.FSYNC", *who, "shared.dat", "1"],
        "FS.TRUNCATE": ["FS.TRUNCATE", *who, "shared.dat", "0"],
        "FS.UNLINKED": ["FS.UNLINKED", *who, "shared.dat"],
        "FS.RENAMED": ["FS.RENAMED", *who, "shared.dat", "other.dat", "0"],
        "FS.FLUSH": ["FS.FLUSH"],
        "FS.STATS": ["FS.STATS"],
        "AUTH (wrong secret)": ["AUTH", "not-the-secret"],
        "FS.STATS after a wrong AUTH": ["FS.STATS"],
    }
    out = {}
    s, f = connect(addr)
    try:
        for name, args in cmds.items():
            try:
                line, body = command(s, f, args)
                closed = line == ""
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            if closed:
                # The server closes a connection that keeps asking without the secret (after a
                # few refusals): a new connection for the rest, each refused as the first.
                s.close()
                s, f = connect(addr)
                line, body = command(s, f, args)
            if body is not None:  # a bulk reply: data reached
                line = f"{line} ({len(body)} bytes of data)"
            out[name] = line
    finally:
        s.close()
    print(json.dumps(out))


def stats(secret_file, *addrs):
    with open(secret_file) as f:
        secret = f.readline().strip()
    dirty = wb = used = 0
    for addr in addrs:
        s, f = connect(addr)
        with s:
            line, _ = command(s, f, ["AUTH", secret])
            if line != "+OK":
                sys.exit(f"{addr}: AUTH: {line}")
            line, body = command(s, f, ["FS.STATS"])
            if body is None:
                sys.exit(f"{addr}: FS.STATS: {line}")
            d = json.loads(body)
            dirty += d.get("dirty_bytes", 0)
            wb += d.get("writeback_bytes", 0)
            used += d.get("used_bytes", 0)
    print(dirty, wb, used)


def fio(path):
    with open(path) as f:
        text = f.read()
    doc = json.loads(text[text.index("{"):])
    total, runtime, cpu = 0, 0, 0.0
    for job in doc["jobs"]:
        total += job["write"]["io_bytes"]
        runtime = max(runtime, job["write"]["runtime"], job["job_runtime"])
        cpu += (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
    print(f"{total} {runtime} {total / 1e6 / max(runtime / 1000, 1e-9):.1f} {cpu:.2f}")


def proc(*pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    print(f"{total / tick:.2f}")


def cpu():
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle, iowait
    print(f"{(sum(v[:8]) - idle) / tick:.2f} {sum(v[:8]) / tick:.2f}")


def report(rows_path, kv_path, out):
    rows = []
    with open(rows_path) as f:
        for line in f:
            if line.strip():
                c, r, n = (line.rstrip("\n").split("\t") + ["", ""])[:3]
                rows.append({"check": c, "result": r, "numbers": n})
    values = {}
    with open(kv_path) as f:
        for line in f:
            if "\t" in line:
                k, v = line.rstrip("\n").split("\t", 1)
                try:
                    values[k] = json.loads(v)
                except ValueError:
                    values[k] = v
    rows.sort(key=lambda r: r["check"])  # by part, whatever order they ran in
    print("| check | result | numbers |")
    print("|---|---|---|")
    for r in rows:
        print(f'| {r["check"]} | {r["result"]} | {r["numbers"]} |')
    if out != "-":
        with open(out, "w") as f:
            json.dump({"rows": rows, "values": values}, f, indent=1)
            f.write("\n")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "write": write,
        "check": check,
        "sha": sha,
        "many": many,
        "eio": eio,
        "warm": warm,
        "probe": probe,
        "resp": resp,
        "stats": stats,
        "fio": fio,
        "proc": proc,
        "cpu": cpu,
        "report": report,
    }[cmd](*args)


if __name__ == "__main__":
    main()
