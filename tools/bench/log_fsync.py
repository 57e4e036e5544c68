#!/usr/bin/env python3
"""What an fsync of a log costs when the log grows, against one written over blocks it already has.

What it measures
  ROUNDS times: COUNT writes of CHUNK bytes, each followed by fdatasync, once appended to a new
  file (each fsync also commits the new size and blocks to the file system's journal) and once
  written over a file of the same length written and synced before (the data alone). CHUNK's
  default, 6,500 bytes, is one group commit of `tools/bench/group_commit.sh`: 50 SETs of 100-byte
  values, about 130 log bytes each. This is why the store log recycles its segments and
  preallocates its first one under `--durability always` (crates/store/src/behind.rs).

How to read it
  stdout: one markdown row per round, microseconds per write-and-fdatasync of each kind, and
  their ratio (below 1: writing over is cheaper).

Usage
  tools/bench/log_fsync.py [DIR]   (DIR: where the files go, default target/; the file system
                                    measured is DIR's)
  env: ROUNDS (3), COUNT (2000), CHUNK (6500)

Needs python3 on Linux. The two files are removed at exit.
"""
import os
import sys
import time

ROUNDS = int(os.environ.get("ROUNDS", "3"))
COUNT = int(os.environ.get("COUNT", "2000"))
CHUNK = int(os.environ.get("CHUNK", "6500"))


def run(path: str, written_before: bool) -> float:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if written_before:
            os.write(fd, b"\0" * (COUNT * CHUNK))
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        buf = b"x" * CHUNK
        started = time.perf_counter()
        for _ in range(COUNT):
            os.write(fd, buf)
            os.fdatasync(fd)
        return (time.perf_counter() - started) / COUNT * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    where = sys.argv[1] if len(sys.argv) > 1 else "target"
    os.makedirs(where, exist_ok=True)
    print(f"| round | appended µs | written over µs | ratio |  (chunk {CHUNK} B, {COUNT} each, {where})")
    print("|---:|---:|---:|---:|")
    for r in range(1, ROUNDS + 1):
        grown = run(os.path.join(where, "log_fsync_grown"), False)
        over = run(os.path.join(where, "log_fsync_over"), True)
        print(f"| {r} | {grown:.0f} | {over:.0f} | {over / grown:.2f} |")


if __name__ == "__main__":
    main()
