#!/usr/bin/env python3
"""The model's stalls: how often a limited cache's trajectory stops, and how long it stays
stopped, fitted to one measured run and judged on four others (issue 36).

    python3 tools/fit/parsplice_stalls.py [--binary PATH] [--shared DIR] [--json FILE] [--check]

MEASURED (../shared/results/parsplice-8node-policies; README beside the data):
- a stall: a stretch of `times.txt` rows (every 100 s) over which the trajectory does not grow;
  from the last row that grew to the next that grows (healed), or to the end (censored).
- its atoms: 2.62 + trajectory / 100,000 (the model's A0 and the runs' growth delay).
- the segments its workers started meanwhile: the WorkManager's gets (perf.1 DBMemoryGet, one per
  segment) over the stall, read at its ends by linear interpolation; t = unix_ts - the first
  timestamp of the run's three perf files.

THE MODEL (crates/parsplice/src/model.rs, `lost`, `heal_chance`): a store read of a state the
persistent store never got stalls the trajectory (chance LOST_SHARE per store read); each segment
completed while stalled, the n-th since it stalled, finds the state again with chance
HEAL_SCALE / basin_states(atoms) * exp(-n / HEAL_DECAY_SEGMENTS), with basin_states = K0 *
atoms^KAPPA * (251 / 27)^OMEGA * temperature (the fit of tools/fit/parsplice_model.py, read from
model.rs).

FITTED on LRU 10 (scale-cachelimit-8n-10-72001-LRU, 13 stalls, the last censored):
- HEAL_SCALE and HEAL_DECAY_SEGMENTS by maximum likelihood (each stall's n = its segments; a
  healed one counts its chance of lasting n and then healing, a censored one its chance of lasting
  n): for a given decay the best HEAL_SCALE is healed stalls / sum of D (1 - exp(-n / D)) /
  basin_states, and the decay is found by golden-section search on its log. The same fit without
  the decay (D infinite) is printed beside it, with both fits' log likelihood on the judged runs.
- LOST_SHARE: LRU 10's stalls per second of progress (15,000 s less the time stalled) over the
  model's store reads per second on LRU 10 with no stalls (`pliant parsplice compare --json --set
  lost_share=0`, its `model_store_reads` over 15,000 s).
JUDGED on the four two-phase runs (100,000 keys then 10, 100, 1,000, 10,000), which the fit never
saw: the stalls their model store reads predict against the measured, and each measured stall's
chance of lasting as long as it did under the fitted heal.

THE RESULT, over seeds (`--seeds N`, default 5: `pliant parsplice compare --json --seed S` for
S = 1..N): each run's efficiency at 2.5 h and 4.2 h, measured against the model's mean and range,
and its stop (the trajectory flat from then to the end, 1,800 s or more) against the model's per
seed; how many runs are within 5 points at 2.5 h, 8 at 4.2 h and 15 minutes of the stop.

`--check` fails (exit 1) when model.rs's LOST_SHARE, HEAL_SCALE or HEAL_DECAY_SEGMENTS is not the fit's (two
significant digits). About six minutes (1 + N model comparisons). Python 3 standard library.
"""

import argparse
import bisect
import gzip
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_RS = os.path.join(ROOT, "crates", "parsplice", "src", "model.rs")
A0, DELAY, END = 2.62, 100_000.0, 15_000.0
WORKERS, TRACED = 251, 27
FIT = ("lru-10", "scale-cachelimit-8n-10-72001-LRU", 0)
# With each run's trim (../shared/results/README.md: the first perf.1 sample with
# MantlePolicySwitch = 1); LRU 10 is limited from the start.
JUDGED = (
    ("two-phase-100000-10", "scale-cachedecrease-8n-10-72376", 6680),
    ("two-phase-100000-100", "scale-cachedecrease-8n-100-72372", 6910),
    ("two-phase-100000-1000", "scale-cachedecrease-8n-1000-72378", 6710),
    ("two-phase-100000-10000", "scale-cachedecrease-8n-10000-72374", 6730),
)


def const(text, name):
    m = re.search(rf"pub const {name}: f64 = ([0-9._eE-]+);", text)
    if not m:
        sys.exit(f"{MODEL_RS}: no const {name}")
    return float(m.group(1).replace("_", ""))


def times(path):
    with open(path, encoding="utf-8") as f:
        return [tuple(float(x) for x in line.split()[:2]) for line in f if line.strip()]


def gets(run_dir):
    """(t, cumulative WorkManager gets) from perf.1, t from the run's first perf timestamp."""
    first, series = None, []
    for n in (1, 2, 3):
        with gzip.open(os.path.join(run_dir, f"perf.{n}.csv.gz"), "rt") as f:
            for line in f:
                ts, counter, value = line.rstrip("\n").split(",")[:3]
                ts = int(ts)
                first = ts if first is None else min(first, ts)
                if n == 1 and counter == "DBMemoryGet":
                    series.append((ts, float(value)))
    return [(ts - first, v) for ts, v in series]


def at(series, t):
    ts = [x[0] for x in series]
    i = bisect.bisect_right(ts, t)
    if i == 0:
        return series[0][1]
    if i == len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def stalls(rows):
    """[(start, end, healed, atoms)] of the flat stretches of `rows`."""
    out, start = [], None
    for i in range(1, len(rows)):
        flat = rows[i][1] == rows[i - 1][1]
        if flat and start is None:
            start = i - 1
        if not flat and start is not None:
            out.append((rows[start][0], rows[i - 1][0], True, A0 + rows[start][1] / DELAY))
            start = None
    if start is not None:
        out.append((rows[start][0], rows[-1][0], False, A0 + rows[start][1] / DELAY))
    return out


def measure(shared, run):
    base = os.path.join(shared, "results", "parsplice-8node-policies")
    tt = [f for f in os.listdir(base) if f.startswith(run) and f.endswith(".times.txt")]
    if len(tt) != 1:
        sys.exit(f"{base}: expected one {run}*.times.txt, found {len(tt)}")
    g = gets(os.path.join(base, "perf", run))
    return [(s, e, healed, a, at(g, e) - at(g, s)) for s, e, healed, a in stalls(times(os.path.join(base, tt[0])))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "pliant"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.shared, "results")):
        loud = " (CI=true: this check needs ../shared)" if os.environ.get("CI") else ""
        sys.exit(f"missing {a.shared}/results{loud}")
    text = open(MODEL_RS, encoding="utf-8").read()
    k0, kappa, omega = const(text, "K0"), const(text, "KAPPA"), const(text, "OMEGA")

    def basin(atoms):
        return k0 * atoms ** kappa * (WORKERS / TRACED) ** omega

    fit = measure(a.shared, FIT[1])
    healed = sum(1 for s in fit if s[2])
    heal_scale, decay = heal_fit(fit, basin)
    plain = healed / sum(segs / basin(atoms) for _, _, _, atoms, segs in fit)
    stalled = sum(e - s for s, e, _, _, _ in fit)
    onsets_per_s = len(fit) / (END - stalled)

    cmd = [a.binary, "parsplice", "compare", "--json", "--set", "lost_share=0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    model = {r["policy"]: r for r in json.loads(p.stdout)}
    reads_per_s = model[FIT[0]]["model_store_reads"] / END
    lost_share = onsets_per_s / reads_per_s

    print(f"Fitted on {FIT[1]} ({len(fit)} stalls, {healed} healed, {stalled:.0f} s stalled):")
    print(f"- HEAL_SCALE = {heal_scale:.3g} and HEAL_DECAY_SEGMENTS = {decay:.3g} (log likelihood "
          f"{loglik(fit, basin, heal_scale, decay):.1f}); without the decay HEAL_SCALE would be "
          f"{plain:.3g} ({loglik(fit, basin, plain, math.inf):.1f})")
    print(f"- LOST_SHARE = {lost_share:.3g} ({onsets_per_s * 3600:.2f} stalls per hour of "
          f"progress / the model's {reads_per_s:.3f} store reads/s on LRU 10)")
    print("\n| run | stall at | atoms | lasted | healed | segments | model: chance it never heals | "
          "chance it lasts that long (without the decay) |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    judged = {}
    for name, run, _ in (FIT,) + JUDGED:
        rows = measure(a.shared, run)
        judged[name] = rows
        for s, e, h, atoms, segs in rows:
            never = math.exp(-heal_scale * decay / basin(atoms))
            survive = survival(segs, basin(atoms), heal_scale, decay)
            before = survival(segs, basin(atoms), plain, math.inf)
            print(f"| {name} | {s:,.0f} s | {atoms:.1f} | {e - s:,.0f} s{'' if h else '+'} | "
                  f"{'yes' if h else 'no'} | {segs:,.0f} | {never:.2f} | {survive:.2f} ({before:.2f}) |")
    held = [r for n, _, _ in JUDGED for r in judged[n]]
    print(f"\nLog likelihood of the judged runs' {len(held)} stalls: "
          f"{loglik(held, basin, heal_scale, decay):.1f} with the decay, "
          f"{loglik(held, basin, plain, math.inf):.1f} without.")
    print("\nWhen the first stall comes once the cache is limited: the model's mean wait "
          "(1 / (LOST_SHARE × its store reads per second from then on, no-stall run)) against "
          "the measured:\n")
    print("| run | limited from | model store reads/s | model: mean wait | measured: first stall after |")
    print("|---|---:|---:|---:|---:|")
    for name, _, since in (FIT,) + JUDGED:
        rate = model[name]["model_store_reads"] / (END - since)
        first = judged[name][0][0] - since if judged[name] else None
        wait = 1 / (lost_share * rate) if rate > 0 else math.inf
        print(f"| {name} | {since:,} s | {rate:.2f} | {wait:,.0f} s | "
              f"{'none' if first is None else f'{first:,.0f} s'} |")
    seeds = {}
    for seed in range(1, a.seeds + 1):
        cmd = [a.binary, "parsplice", "compare", "--json", "--seed", str(seed)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
        seeds[seed] = {r["policy"]: r for r in json.loads(p.stdout)}
    if seeds:
        result(seeds)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"heal_scale": heal_scale, "heal_decay_segments": decay, "lost_share": lost_share, "seeds": seeds,
                       "store_reads": {n: model[n]["model_store_reads"] for n, _, _ in (FIT,) + JUDGED},
                       "stalls": judged}, f, indent=1)
    if a.check:
        bad = []
        for name, value in (("LOST_SHARE", lost_share), ("HEAL_SCALE", heal_scale),
                            ("HEAL_DECAY_SEGMENTS", decay)):
            have = const(text, name)
            if f"{have:.2g}" != f"{value:.2g}":
                bad.append(f"{name} = {have} (fit: {value:.2g})")
        if bad:
            sys.exit(f"{MODEL_RS} does not hold the fit: " + "; ".join(bad))
        print("\nmodel.rs holds the fit.")


def survival(segs, basin, scale, decay):
    """Chance a stall at `basin` states lasts `segs` segments unhealed."""
    if math.isinf(decay):
        return math.exp(-scale * segs / basin)
    return math.exp(-scale * decay / basin * (1 - math.exp(-segs / decay)))


def loglik(rows, basin, scale, decay):
    """Log likelihood of `rows` (measure's stalls): each lasts its segments, and a healed one then
    heals."""
    total = 0.0
    for _, _, healed, atoms, segs in rows:
        b = basin(atoms)
        total += math.log(survival(segs, b, scale, decay))
        if healed:
            total += math.log(scale / b * (1.0 if math.isinf(decay) else math.exp(-segs / decay)))
    return total


def heal_fit(rows, basin):
    """(HEAL_SCALE, HEAL_DECAY_SEGMENTS) of most likelihood for `rows`."""
    healed = sum(1 for r in rows if r[2])

    def scale(decay):
        return healed / sum(decay * (1 - math.exp(-segs / decay)) / basin(atoms)
                            for _, _, _, atoms, segs in rows)

    def cost(log_d):
        d = 10 ** log_d
        return -loglik(rows, basin, scale(d), d)

    lo, hi = 3.0, 9.0
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        if cost(x1) < cost(x2):
            hi = x2
        else:
            lo = x1
    d = 10 ** ((lo + hi) / 2)
    return scale(d), d


def result(seeds):
    n = len(seeds)
    print(f"\nThe model with the fitted constants against every measured run, seeds 1-{n} "
          "(efficiency: measured | model mean [min-max]; stop: measured | model per seed):\n")
    print("| run | 2.5 h | 4.2 h | stop |")
    print("|---|---|---|---|")
    within = {"2.5 h": 0, "4.2 h": 0, "stop": 0}
    runs = list(seeds[1])
    for name in runs:
        rows = [seeds[s][name] for s in seeds]
        m = rows[0]
        cells = []
        for key, limit, label in (("2_5h", 5, "2.5 h"), ("4_2h", 8, "4.2 h")):
            v = [100 * r[f"model_{key}"] for r in rows]
            mean = sum(v) / n
            within[label] += abs(mean - 100 * m[f"measured_{key}"]) <= limit
            cells.append(f"{100 * m[f'measured_{key}']:.1f}% \\| {mean:.1f}% "
                         f"[{min(v):.1f}-{max(v):.1f}]")
        stops = [r["model_stop_s"] for r in rows]
        fmt = lambda t: "none" if t is None else f"{t:,.0f}"
        ms = m["measured_stop_s"]
        hits = sum(1 for t in stops if (t is None and ms is None)
                   or (t is not None and ms is not None and abs(t - ms) <= 900))
        within["stop"] += hits * 2 > n
        cells.append(f"{fmt(ms)} \\| " + ", ".join(fmt(t) for t in stops))
        print(f"| {name} | " + " | ".join(cells) + " |")
    total = len(runs)
    print(f"\nWithin 5 points at 2.5 h (mean): {within['2.5 h']} of {total}; within 8 at 4.2 h: "
          f"{within['4.2 h']} of {total}; stop within 15 minutes (or none, as measured) in most "
          f"seeds: {within['stop']} of {total}.")


if __name__ == "__main__":
    main()
