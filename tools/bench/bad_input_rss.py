#!/usr/bin/env python3
"""How much a `pliant serve` node's memory grows under bad input: the suite's test
`stalled_half_frames_and_random_bytes_leave_memory_bounded_and_the_node_answering`
(crates/pliant/tests/serve_cli.rs), which only checks a bound (64 MiB), run as a script that
prints the growth.

The test's input as of commit dd1c62d: 200 connections that each claim a 500 MB value, send three
bytes of it and stall; two oversized claims as whole frames; 150 seeded random byte strings (the
test's xorshift and alphabet) on fresh connections, each read for 30 ms (the test has since come
to half-close each and wait for its close; the bytes sent are the same). Then the node must still answer a GET, and the
growth of its resident memory (VmRSS) since just before is printed. Python 3 standard library only.

    cargo build --release -p pliant
    python3 tools/bench/bad_input_rss.py [--binary target/release/pliant]
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALPHABET = b"*$:+-_#,%~>!=(\r\n0123456789abcXYZ "
MASK = (1 << 64) - 1


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def command(addr, *args):
    """One RESP command on a new connection; returns the first reply line."""
    with socket.create_connection(addr, timeout=10) as s:
        frame = f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(a)}\r\n".encode() + a.encode() + b"\r\n" for a in args)
        s.sendall(frame)
        return s.makefile("rb").readline().decode().rstrip("\r\n")


def raw(addr, data):
    """Sends `data` on a new connection; returns what comes back until close (2 s at most)."""
    with socket.create_connection(addr, timeout=2) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(4096):
                out += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return out.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ap.add_argument("--binary", default=os.path.join(target, "release", "pliant"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        node = subprocess.Popen([a.binary, "serve", "--bind", "127.0.0.1:0", "--no-store"],
                                cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            line = node.stderr.readline()
            prefix = "pliant serve: listening on "
            if not line.startswith(prefix):
                sys.exit(f"pliant serve did not say where it listens: {line!r}")
            host, port = line[len(prefix):].split()[0].rsplit(":", 1)
            addr = (host, int(port))
            assert command(addr, "SET", "k", "v") == "+OK"
            before = rss(node.pid)
            stalled = []
            for _ in range(200):
                s = socket.create_connection(addr, timeout=10)
                s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$500000000\r\nabc")
                stalled.append(s)
            for data in (b"*1\r\n$536870913\r\n", b"*1048577\r\n"):
                reply = raw(addr, data)
                assert reply.startswith("-ERR Protocol error"), reply
            x = 0x9E3779B97F4A7C15
            for _ in range(150):
                n = 1 + x % 64
                data = bytearray()
                for _ in range(n):
                    x ^= (x << 13) & MASK
                    x ^= x >> 7
                    x ^= (x << 17) & MASK
                    data.append(ALPHABET[x % len(ALPHABET)])
                with socket.create_connection(addr, timeout=10) as s:
                    s.settimeout(0.03)
                    s.sendall(bytes(data))
                    try:
                        s.recv(256)
                    except (socket.timeout, ConnectionResetError):
                        pass
            assert command(addr, "GET", "k") == "$1", "the node no longer answers"
            grown = max(0, rss(node.pid) - before)
            for s in stalled:
                s.close()
        finally:
            node.terminate()
            node.wait(timeout=30)
    print(f"200 stalled 500 MB claims, 2 oversized frames, 150 random byte strings: RSS grew "
          f"{grown / 1e6:.1f} MB ({grown:,} bytes; the suite's bound is 64 MiB); the node still "
          f"answered")


if __name__ == "__main__":
    main()
