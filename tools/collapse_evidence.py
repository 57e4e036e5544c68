#!/usr/bin/env python3
"""What the measured runs say about the 4-hour collapse of the small-cache policies.

Prints the three measurements the README's "What the measured runs show of that collapse" rests
on, from ../shared only (Python 3 standard library; about a minute, most of it reading the two
rank4 traces):

1. MD time produced per worker per second (the third column of `times.txt`) against the atoms in
   the system (2.62 + trajectory / growth delay, the model's A0), for the two traced one-node runs
   (27 workers) and the measured eight-node runs (216 workers), in bins of atoms. Production is
   one function of atoms whatever the node count and policy: the runs that stopped splicing kept
   producing at their frozen size. Under it, the share of that MD each run spliced into its
   trajectory by 9,000 s.
2. Per 1,000 s of each trace: reads per second at the WorkManager, MD produced per read and
   trajectory spliced per read. Every read starts a segment of about 10 ps of MD, in both runs;
   the spliced part varies.
3. The miss ratio of a 10-key LRU cache per 1,000 s of each trace (reads and puts both insert, as
   in the model's WorkManager): the load a 10-key cache sends the store at the traced locality;
   and what reached the tiers above the WorkManager (rank 3, the in-memory database; rank 2,
   LevelDB), by operation.
   Per 1,000 s of each trace, the states put at the WorkManager that never reached rank 3 or
   rank 2: forwarding upward is not guaranteed, even with an unlimited cache on one node.
4. For each eight-node run, the stretches of 500 s or more in which the trajectory did not grow,
   with the atoms then and what the workers produced meanwhile (total ps/s).

Usage: python3 tools/collapse_evidence.py [--shared DIR]   (default ../shared from the repo root)
"""

import argparse
import collections
import gzip
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A0 = 2.62  # crates/parsplice/src/model.rs
SPLICED_BY = 9000  # s: every run reached it
RUNS_8N = {
    "unlimited": "scale-cachelimit-8n-unlimited-71994",
    "LRU 100,000": "scale-cachelimit-8n-100000-72005-LRU",
    "LRU 10": "scale-cachelimit-8n-10-72001-LRU",
    "100K → 10": "scale-cachedecrease-8n-10-72376",
    "100K → 10,000": "scale-cachedecrease-8n-10000-72374",
}


def times(path):
    with open(path, encoding="utf-8") as f:
        return [tuple(float(x) for x in line.split()) for line in f if line.strip()]


def production(rows, delay, workers):
    """(atoms, MD ps produced per worker per s) between consecutive rows."""
    out = []
    for (t0, l0, c0), (t1, l1, c1) in zip(rows, rows[1:]):
        atoms = A0 + (l0 + l1) / 2 / delay
        out.append((atoms, (c1 - c0) / (t1 - t0) / workers))
    return out


def trace_windows(path, window=1000, lru=10):
    """Per window of the trace's clock: reads, LRU-`lru` misses."""
    reads = collections.Counter()
    misses = collections.Counter()
    cache = collections.OrderedDict()
    t0 = None
    with gzip.open(path, "rt") as f:
        for line in f:
            ts, op, _, key = line.rstrip("\n").split(",")[:4]
            ts = int(ts)
            t0 = ts if t0 is None else t0
            w = (ts - t0) // window
            is_read = op == "DBMemoryGet"  # each read is logged twice: Get, then MRUGet
            if not is_read and op != "DBMemoryPut":
                continue
            if is_read:
                reads[w] += 1
            if key in cache:
                cache.move_to_end(key)
            else:
                if is_read:
                    misses[w] += 1
                cache[key] = True
                if len(cache) > lru:
                    cache.popitem(last=False)
    return reads, misses


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    a = ap.parse_args()
    traces = os.path.join(a.shared, "traces", "parsplice")
    results = os.path.join(a.shared, "results", "parsplice-8node-policies")
    for d in (traces, results):
        if not os.path.isdir(d):
            sys.exit(f"{os.path.normpath(d)} is missing: this tool reads the measured runs")

    runs = {  # name: (times.txt rows, growth delay, workers)
        "d1M (1 node)": (times(f"{traces}/d1M/times.txt"), 1e6, 27),
        "d100K (1 node)": (times(f"{traces}/d100K/times.txt"), 1e5, 27),
    }
    for name, run in RUNS_8N.items():
        runs[f"{name} (8 nodes)"] = (times(f"{results}/{run}.times.txt"), 1e5, 216)
    series = {name: production(*run) for name, run in runs.items()}
    bins = [(lo, lo + 5) for lo in range(5, 65, 5)]
    print("1. MD produced per worker, ps/s, by atoms in the system (mean over the run's "
          "100-s steps in the bin)\n")
    print("| atoms | " + " | ".join(series) + " |")
    print("|---" * (len(series) + 1) + "|")
    for lo, hi in bins:
        cells = []
        for pts in series.values():
            v = [p for x, p in pts if lo <= x < hi]
            cells.append(f"{sum(v) / len(v):.1f}" if v else "")
        if any(cells):
            print(f"| {lo}–{hi} | " + " | ".join(cells) + " |")
    print(f"\nTrajectory spliced of the MD produced, by {SPLICED_BY:,} s\n")
    for name, (rows, _, _) in runs.items():
        row = next((r for r in rows if r[0] == SPLICED_BY), None)
        if row:
            print(f"- {name}: {row[1] / 1e6:.2f} M of {row[2] / 1e6:.2f} M ps "
                  f"({row[1] / row[2]:.0%})")

    print("\n2–3. Per 1,000 s of each rank4 trace\n")
    print("| trace | from (s) | reads/s | MD ps per read | trajectory ps per read | "
          "LRU-10 miss ratio |")
    print("|---|---|---|---|---|---|")
    for d in ("d100K", "d1M"):
        rows = {int(t): (l, c) for t, l, c in times(f"{traces}/{d}/times.txt")}
        reads, misses = trace_windows(f"{traces}/{d}/rank4.csv.gz")
        prev = (0.0, 0.0)
        for w in range(15):
            end = rows.get((w + 1) * 1000)
            if end is None or reads[w] == 0:
                break
            r = reads[w]
            print(f"| {d} | {w * 1000:,} | {r / 1000:.1f} | {(end[1] - prev[1]) / r:.2f} | "
                  f"{(end[0] - prev[0]) / r:.2f} | {misses[w] / r:.4f} |")
            prev = end

    print("\nOperations that reached the tiers above the WorkManager (whole trace)\n")
    print("| trace | rank | operation | count |")
    print("|---|---|---|---|")
    for d in ("d100K", "d1M"):
        for rank in (3, 2):
            ops = collections.Counter()
            with gzip.open(f"{traces}/{d}/rank{rank}.csv.gz", "rt") as f:
                for line in f:
                    ops[line.split(",")[1]] += 1
            for op, n in sorted(ops.items()):
                print(f"| {d} | {rank} | {op} | {n:,} |")

    print("\nStates put at the WorkManager that never reached the tiers above, by when they were put\n")
    notes = []
    print("| trace | from (s) | states put | never at rank 3 | never at rank 2 |")
    print("|---|---|---|---|---|")
    for d in ("d100K", "d1M"):
        put_at = {}
        first_put = {}
        last_read = {}
        t0 = None
        with gzip.open(f"{traces}/{d}/rank4.csv.gz", "rt") as f:
            for line in f:
                ts, op, _, key = line.rstrip("\n").split(",")[:4]
                t0 = int(ts) if t0 is None else t0
                if op == "DBMemoryPut" and key not in put_at:
                    put_at[key] = (int(ts) - t0) // 1000
                    first_put[key] = int(ts)
                elif op == "DBMemoryGet":
                    last_read[key] = int(ts)
        above = {}
        for rank, op in ((3, "DBMemoryPut"), (2, "LDBPut")):
            with gzip.open(f"{traces}/{d}/rank{rank}.csv.gz", "rt") as f:
                above[rank] = {p[3] for p in (l.rstrip("\n").split(",") for l in f)
                               if p[1] == op}
        per = collections.defaultdict(lambda: [0, 0, 0])
        for key, w in put_at.items():
            c = per[w]
            c[0] += 1
            c[1] += key not in above[3]
            c[2] += key not in above[2]
        total = [sum(c[i] for c in per.values()) for i in range(3)]
        for w in sorted(per):
            n, m3, m2 = per[w]
            print(f"| {d} | {w * 1000:,} | {n:,} | {m3:,} ({m3 / n:.1%}) | {m2:,} ({m2 / n:.1%}) |")
        print(f"| {d} | all | {total[0]:,} | {total[1]:,} ({total[1] / total[0]:.1%}) | "
              f"{total[2]:,} ({total[2] / total[0]:.1%}) |")
        lost = [k for k in put_at if k not in above[3]]
        brief = sum(1 for k in lost if last_read.get(k, first_put[k]) - first_put[k] <= 1)
        if lost:
            notes.append(f"{d}: {brief:,} of the {len(lost):,} states that never reached rank 3 "
                         f"({brief / len(lost):.0%}) were last read within 1 s of their put")
    print("\n" + "\n".join(notes))

    print("\n4. Stretches of 500 s or more without trajectory gain, eight-node runs\n")
    print("| run | from (s) | to (s) | atoms | MD produced meanwhile, ps/s |")
    print("|---|---|---|---|---|")
    for name, run in RUNS_8N.items():
        rows = times(f"{results}/{run}.times.txt")
        i = 0
        while i < len(rows) - 1:
            j = i
            while j + 1 < len(rows) and rows[j + 1][1] == rows[i][1]:
                j += 1
            if rows[j][0] - rows[i][0] >= 500:
                (t0, l0, c0), (t1, _, c1) = rows[i], rows[j]
                print(f"| {name} | {t0:,.0f} | {t1:,.0f} | {A0 + l0 / 1e5:.1f} | "
                      f"{(c1 - c0) / (t1 - t0):,.0f} |")
            i = j + 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
