#!/usr/bin/env python3
"""Helpers for tools/bench/fs_fio.sh (standard library only).

  fs_fio.py fio JSON                 -> "BW_BYTES_PER_S IOPS RUNTIME_MS" of fio's one job
                                        (--output-format=json; read or write, whichever moved bytes)
  fs_fio.py get JSON KEY[.KEY...] [DEFAULT]
                                     -> one field of a JSON file ("-" reads stdin), e.g. stats.pid;
                                        DEFAULT if it is missing (a counter an older pliant lacks)
  fs_fio.py median V...              -> the median (the middle value; mean of the two middle ones)
  fs_fio.py pairs "A..." "B..."      -> B/A run by run (run i of A against run i of B, measured
                                        next to each other), as "MEDIAN (MIN-MAX)": on a machine
                                        whose disk speed drifts between runs the ratio of each
                                        interleaved pair is steadier than the ratio of medians
  fs_fio.py rates SAMPLES CSV        -> write-back throughput over time: SAMPLES has lines
                                        "T BYTES" (seconds since the unmount began, the mount's
                                        writeback_bytes counter); CSV gets "seconds,MB/s" for each
                                        interval (x = the interval's end). Prints
                                        "PEAK_MBPS MEAN_MBPS SAMPLES" (mean over the sampled span).
"""

import json
import statistics
import sys


def fio(path):
    with open(path) as f:
        text = f.read()
    # fio may print notes ("fio: ...") before the JSON document.
    doc = json.loads(text[text.index("{"):])
    job = doc["jobs"][0]
    for side in ("write", "read"):
        s = job[side]
        if s["io_bytes"] > 0:
            print(f'{s["bw_bytes"]} {s["iops"]:.1f} {s["runtime"]}')
            return
    sys.exit(f"{path}: fio moved no bytes")


def get(path, key, default=None):
    doc = json.load(sys.stdin if path == "-" else open(path))
    for k in key.split("."):
        if k not in doc and default is not None:
            print(default)
            return
        doc = doc[k]
    print(doc)


def median(values):
    print(f"{statistics.median(float(v) for v in values):g}")


def pairs(a, b):
    a, b = [float(v) for v in a.split()], [float(v) for v in b.split()]
    if len(a) != len(b) or not a:
        sys.exit(f"fs_fio.py pairs: {len(a)} and {len(b)} values: expected as many, at least one")
    r = [y / x for x, y in zip(a, b)]
    print(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")


def rates(samples, out):
    pts = []
    with open(samples) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                pts.append((float(parts[0]), int(parts[1])))
    # The last line (the end of the flush, from the unmount's report) may come before the
    # last sample.
    pts.sort()
    rows = []
    for (t0, b0), (t1, b1) in zip(pts, pts[1:]):
        if t1 > t0:
            rows.append((t1, (b1 - b0) / (t1 - t0) / 1e6))
    with open(out, "w") as f:
        f.write("seconds,MB/s\n")
        for t, r in rows:
            f.write(f"{t:.3f},{r:.2f}\n")
    if len(pts) >= 2 and pts[-1][0] > pts[0][0]:
        mean = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]) / 1e6
    else:
        mean = 0.0
    peak = max((r for _, r in rows), default=0.0)
    print(f"{peak:.1f} {mean:.1f} {len(pts)}")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "fio" and len(args) == 1:
        fio(args[0])
    elif cmd == "get" and len(args) in (2, 3):
        get(*args)
    elif cmd == "median" and args:
        median(args)
    elif cmd == "pairs" and len(args) == 2:
        pairs(*args)
    elif cmd == "rates" and len(args) == 2:
        rates(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
