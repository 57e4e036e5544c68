#!/usr/bin/env python3
"""libCacheSim's miss counts on the real ParSplice d100K WorkManager trace: the outside reference
for the counts `pliant sim` gives on it (README, "The ParSplice d100K WorkManager trace").

The trace (`../shared/traces/parsplice/d100K/rank4.csv.gz`, never copied into the repository) is
parsed here on its own, from the trace folder's README: one logical read per `DBMemoryGet` line
(its `DBMemoryMRUGet` twin is the same read) and one logical write per `DBMemoryPut` line (its
`DBMemoryPutUnique` and `DBMemoryMRUPut` lines are the same write). Every logical operation, in
trace order, is then handed to libCacheSim's own C core (the `libcachesim` package) as a request of
size 1, so a cache of N bytes holds N keys.

The mapping. Pliant counts misses of reads only: a write stores the key and is not a lookup.
libCacheSim has no write: every request is a `get`, and a miss admits the object. On this trace
every key is written exactly once, before its first read, so each write is a miss that inserts a
new key at the head, which is what Pliant's write does. This script therefore counts libCacheSim's
misses on the read requests and on the write requests separately: `read_misses` is the number to
compare with Pliant's, and `misses` (every request, what libCacheSim itself reports) is
`read_misses` plus one miss per write. (A read-only trace is not comparable: without the writes
each key's first read would miss.)

Writes crates/sim/tests/data/parsplice-d100K-libcachesim.json, which
`cargo test -p pliant-sim --test integration libcachesim` holds Pliant's counts to. Run from the
repository root, with ../shared beside it:
    python3 -m venv /tmp/lcs && /tmp/lcs/bin/pip install libcachesim==0.3.5
    /tmp/lcs/bin/python tools/golden/parsplice_reference.py
"""

import gzip
import hashlib
import json
import os
import sys
from importlib.metadata import version

import libcachesim as lcs

# The algorithms make_goldens.py checks, less Belady (it needs next-access times, which a
# ParSplice trace does not carry).
from make_goldens import ALGOS as GOLDEN_ALGOS

TRACE = "traces/parsplice/d100K/rank4.csv.gz"
OUT = os.path.join("crates", "sim", "tests", "data", "parsplice-d100K-libcachesim.json")
COMMAND = "/tmp/lcs/bin/python tools/golden/parsplice_reference.py"
ALGOS = {name: cls for name, cls in GOLDEN_ALGOS.items() if name != "belady"}
# (algorithm, capacity in keys): every libCacheSim-compatible algorithm at the README's 100 keys,
# and LRU at the table's other two sizes.
RUNS = [(a, 100) for a in ALGOS] + [("lru", 10_000), ("lru", 100_000)]


def operations(path):
    """[(is_write, key)] of the trace's logical operations, in order."""
    ops = []
    with gzip.open(path, "rt") as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split(",")
            if len(fields) != 4:
                sys.exit(f"{path}:{n}: expected unix_ts,op,db,key: {line!r}")
            op = fields[1]
            if op == "DBMemoryGet":
                ops.append((False, int(fields[3])))
            elif op == "DBMemoryPut":
                ops.append((True, int(fields[3])))
            elif op not in ("DBMemoryMRUGet", "DBMemoryPutUnique", "DBMemoryMRUPut"):
                sys.exit(f"{path}:{n}: unknown operation {op!r}")
    return ops


def misses(ops, algo, keys):
    """(misses of reads, misses of writes) of libCacheSim's `algo` with room for `keys` keys."""
    cache = ALGOS[algo](cache_size=keys)
    req = lcs.Request()
    req.obj_size = 1
    out = [0, 0]
    for t, (is_write, key) in enumerate(ops):
        req.obj_id = key
        req.clock_time = t
        if not cache.get(req):
            out[is_write] += 1
    return out[0], out[1]


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.chdir(root)
    path = os.path.join("..", "shared", TRACE)
    if not os.path.exists(path):
        sys.exit(f"{os.path.abspath(path)} is missing: the trace lives in ../shared")
    with open(path, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    ops = operations(path)
    writes = sum(w for w, _ in ops)
    reads = len(ops) - writes
    written, first_read_after_write = set(), True
    for is_write, key in ops:
        if is_write:
            if key in written:
                sys.exit(f"key {key} is written twice: the mapping below does not hold")
            written.add(key)
        elif key not in written:
            first_read_after_write = False
    if not first_read_after_write:
        sys.exit("a key is read before it is written: the mapping below does not hold")
    runs = []
    for algo, keys in RUNS:
        r, w = misses(ops, algo, keys)
        if w != writes:
            sys.exit(f"{algo} {keys} keys: {w} of {writes} writes missed; each should")
        runs.append({"algo": algo, "keys": keys, "read_misses": r, "write_misses": w,
                     "misses": r + w})
        print(f"{algo:6} {keys:>7} keys: {r:>6} read misses (+ {w} writes = {r + w})",
              flush=True)
    reference = {
        "libcachesim": version("libcachesim"),
        "command": COMMAND,
        "trace": f"../shared/{TRACE}",
        "trace_sha256": sha256,
        "reads": reads,
        "writes": writes,
        "mapping": "every logical operation in trace order as a libCacheSim get of size 1 "
                   "(capacity in keys); read_misses counts the misses of reads only, which is "
                   "what Pliant counts; each key is written once before it is read, so every "
                   "write misses and misses = read_misses + writes",
        "runs": runs,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(reference, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
