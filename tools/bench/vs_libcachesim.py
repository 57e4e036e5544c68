#!/usr/bin/env python3
"""Replay speed of Pliant against libCacheSim on the same trace, in one script.

Both read the same oracleGeneral file from disk (decoding included) and run one configuration
per pass; the best of --reps runs is kept for each. Reports requests/s and Pliant's speed as a
multiple of libCacheSim's, and checks both saw the same miss ratio.

    python3 -m venv /tmp/lcs && /tmp/lcs/bin/pip install libcachesim==0.3.5
    cargo build --release
    /tmp/lcs/bin/python tools/bench/vs_libcachesim.py [--reps 3]
"""

import argparse
import json
import os
import subprocess
import tempfile
import time

import libcachesim as lcs

ALGOS = {"lru": lcs.LRU, "arc": lcs.ARC, "sieve": lcs.Sieve, "s3fifo": lcs.S3FIFO}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pliant", default="target/release/pliant")
    ap.add_argument("--trace", default=os.path.join(tempfile.gettempdir(), "bench.oracleGeneral"))
    args = ap.parse_args()

    out = subprocess.run(
        [args.pliant, "bench", "sim", "--json", "--reps", str(args.reps), "--trace", args.trace],
        check=True, capture_output=True, text=True,
    )
    ours = json.loads(out.stdout)
    print(f"{'algo':8} {'keys':>8} {'libCacheSim':>12} {'Pliant':>10} {'ratio':>6}  miss ratio")
    for row in ours:
        best = None
        for _ in range(args.reps):
            reader = lcs.TraceReader(args.trace, lcs.TraceType.ORACLE_GENERAL_TRACE)
            cache = ALGOS[row["algo"]](cache_size=row["keys"])
            t = time.perf_counter()
            miss_ratio, _ = cache.process_trace(reader)
            dt = time.perf_counter() - t
            best = dt if best is None or dt < best else best
        ref = row["requests"] / best / 1e6
        assert abs(miss_ratio - row["miss_ratio"]) < 1e-9, (row, miss_ratio)
        print(f"{row['algo']:8} {row['keys']:>8} {ref:>9.2f} M/s {row['mreq_per_s']:>7.2f} M/s "
              f"{row['mreq_per_s'] / ref:>5.2}x  {miss_ratio:.4f}")


if __name__ == "__main__":
    main()
