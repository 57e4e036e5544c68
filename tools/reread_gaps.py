#!/usr/bin/env python3
"""How often a WorkManager's reads come back to a key after a long gap: for each rank4 trace, the
share of reads after the first half hour that come more than five minutes after the key's
previous read or put (the README's "Replaying a real trace": each such read is a store read the
workers reading that state all wait for). Reads ../shared only; Python 3 standard library;
about 10 s.

    python3 tools/reread_gaps.py
"""

import gzip
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AFTER = 1800  # s from the trace's first line
GAP = 300  # s


def main():
    for run in ("d100K", "d1M"):
        path = os.path.join(ROOT, "..", "shared", "traces", "parsplice", run, "rank4.csv.gz")
        last, reads, long, start = {}, 0, 0, None
        with gzip.open(path, "rt") as f:
            for line in f:
                ts, op, _db, key = line.rstrip("\n").split(",")
                ts = int(ts)
                start = ts if start is None else start
                if op == "DBMemoryPut":
                    last[key] = ts
                elif op == "DBMemoryGet":
                    if ts - start >= AFTER:
                        reads += 1
                        long += key in last and ts - last[key] > GAP
                    last[key] = ts
        print(f"{run}: {long:,} of {reads:,} reads after the first {AFTER // 60} minutes come more "
              f"than {GAP // 60} minutes after the key's previous access ({100 * long / reads:.2f}%)")


if __name__ == "__main__":
    main()
