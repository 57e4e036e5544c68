#!/usr/bin/env python3
"""Makes the cache golden tests: seeded synthetic traces and libCacheSim's miss counts on them.

The traces are written in libCacheSim's oracleGeneral format (packed little-endian records
`u32 time, u64 id, u32 size, i64 next_access_vtime`, -1 = none) and committed gzipped under
crates/cache/tests/data/. The miss counts come from libCacheSim itself (its C core, through the
`libcachesim` package on PyPI), so `cargo test -p pliant-cache --test golden` checks Pliant's
algorithms against the reference, not against themselves.

Run from the repository root:
    python3 -m venv /tmp/lcs && /tmp/lcs/bin/pip install libcachesim==0.3.5
    /tmp/lcs/bin/python tools/golden/make_goldens.py
"""

import bisect
import gzip
import json
import os
import random
import struct
import tempfile

import libcachesim as lcs

OUT = os.path.join("crates", "cache", "tests", "data")
ALGOS = {
    "lru": lcs.LRU,
    "fifo": lcs.FIFO,
    "clock": lcs.Clock,
    "lfu": lcs.LFU,
    "arc": lcs.ARC,
    "sieve": lcs.Sieve,
    "s3fifo": lcs.S3FIFO,
    "belady": lcs.Belady,
}


def zipf_sampler(rng, n, alpha):
    weights = [1.0 / (i + 1) ** alpha for i in range(n)]
    total = sum(weights)
    cdf, acc = [], 0.0
    for w in weights:
        acc += w / total
        cdf.append(acc)
    perm = list(range(1, n + 1))
    rng.shuffle(perm)  # popularity rank is not the key id
    return lambda: perm[min(bisect.bisect_left(cdf, rng.random()), n - 1)]


def zipf_unit(rng):
    draw = zipf_sampler(rng, 2000, 1.0)
    return [(draw(), 1) for _ in range(20000)]


def zipf_sized(rng):
    n = 4000
    draw = zipf_sampler(rng, n, 0.9)
    size = {}
    for k in range(1, n + 1):
        s = int(min(65536, max(16, rng.lognormvariate(7.0, 1.0))))
        if rng.random() < 0.01:
            s = rng.randint(100_000, 1_000_000)  # larger than small caches
        size[k] = s
    return [(k, size[k]) for k in (draw() for _ in range(20000))]


def scan_loop(rng):
    hot = zipf_sampler(rng, 500, 1.1)
    out, scan = [], 0
    while len(out) < 15000:
        if rng.random() < 0.35:
            out.append((10_000 + scan % 3000, 1))  # a looping scan over 3,000 cold keys
            scan += 1
        else:
            out.append((hot(), 1))
    return out


def size_change(rng):
    draw = zipf_sampler(rng, 1000, 0.8)
    return [(draw(), rng.choice([100, 200, 400, 800, 1600])) for _ in range(10000)]


def with_next_access(reqs):
    nxt, last = [-1] * len(reqs), {}
    for i in range(len(reqs) - 1, -1, -1):
        k = reqs[i][0]
        nxt[i] = last.get(k, -1)
        last[k] = i
    return [(i, k, s, nxt[i]) for i, (k, s) in enumerate(reqs)]


def pack(records):
    return b"".join(struct.pack("<IQIq", *r) for r in records)


def misses(raw_path, algo, capacity, ignore_size):
    p = lcs.ReaderInitParam()
    p.ignore_obj_size = ignore_size
    reader = lcs.TraceReader(raw_path, lcs.TraceType.ORACLE_GENERAL_TRACE, p)
    cache = ALGOS[algo](cache_size=capacity)
    n = m = 0
    for req in reader:
        n += 1
        if not cache.get(req):
            m += 1
    return n, m


def main():
    traces = {
        "zipf-unit": (zipf_unit, [("bytes", c) for c in (20, 100, 400, 1000)]),
        "zipf-sized": (zipf_sized, None),
        "scan-loop": (scan_loop, [("bytes", c) for c in (50, 200, 600, 1500)]),
        "size-change": (size_change, [("bytes", c) for c in (2000, 20000, 100000)]),
    }
    golden = {"libcachesim": "0.3.5", "traces": {}}
    for seed, (name, (gen, sizes)) in enumerate(traces.items(), start=1):
        reqs = gen(random.Random(seed))
        records = with_next_access(reqs)
        blob = pack(records)
        with gzip.GzipFile(os.path.join(OUT, f"{name}.oracleGeneral.gz"), "wb", mtime=0) as f:
            f.write(blob)
        if sizes is None:
            ws = sum({k: s for k, s in reqs}.values())
            sizes = [("bytes", int(ws * f)) for f in (0.01, 0.05, 0.2, 0.5)]
            sizes += [("objects", c) for c in (40, 200, 800, 2000)]
        runs = []
        with tempfile.TemporaryDirectory() as d:
            raw = os.path.join(d, "trace.bin")
            with open(raw, "wb") as f:
                f.write(blob)
            for units, cap in sizes:
                for algo in ALGOS:
                    n, m = misses(raw, algo, cap, units == "objects")
                    assert n == len(records), (name, n)
                    runs.append({"algo": algo, "units": units, "capacity": cap, "misses": m})
        golden["traces"][name] = {
            "file": f"{name}.oracleGeneral.gz",
            "requests": len(records),
            "runs": runs,
        }
        print(name, len(records), "requests,", len(runs), "runs")
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
