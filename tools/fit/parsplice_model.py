#!/usr/bin/env python3
"""Fits the ParSplice model's rates and sizes to the measured unlimited run (and, for what that run
cannot show, the two one-node traces), and judges each fit on the runs it was not fitted on
(issue 36: "rates and sizes from the counters of the unlimited run ... the policy runs then
predicted, not fitted").

    python3 tools/fit/parsplice_model.py [--shared DIR] [--json FILE] [--check]

Fitted on the eight-node run scale-cachelimit-8n-unlimited-71994 (times.txt and perf.1, the
WorkManager); production and the superbasins' states also on the one-node traces d100K and d1M
(../shared/traces/parsplice: times.txt and rank4.csv.gz), which cover the small systems that run
passes in its first 100 s and a ten times slower growth.
Judged on the seven others, over the part of each run its policy has not yet acted on: the two
100,000-key caps (whole run for trajectory, production and segment size; keys and bytes up to
their first eviction) and the four two-phase runs up to their trim (all four behave as the
unlimited run until then). LRU 10 is shown too, for production and segment size only (its cache
acts from the start, and its trajectory is the policy's result, not an input).

What is fitted (each a constant of crates/parsplice/src/model.rs, which names this script):
- Trajectory rate R(a) = R0 / (1 + (a / A_C)^GAMMA) ps/s with a = A0 + L / 100,000 atoms:
  dL/dt = R(a) integrates in closed form to t(L) = (L + d A_C / (GAMMA + 1) ((a / A_C)^(GAMMA+1)
  - (A0 / A_C)^(GAMMA+1))) / R0; least squares on ln L over times.txt's rows (every 100 s), A0
  as the model has it (the traces' fit: these runs' files do not start at trajectory 0).
- Production per worker p(a) = P0 / (1 + (a / P_A)^P_GAMMA) ps/s: least squares on the ln of
  times.txt's third column's rate (MD produced, spliced or not) over 600-s windows, divided by
  the workers (252 in `layout`; 27 in the traces), against the window's mean atoms, over the
  unlimited run and both traces (production per worker is one function of the atoms whatever the
  layout: tools/collapse_evidence.py).
- MD per segment: MD produced / the WorkManager's gets (perf.1 DBMemoryGet), from 300 s (the
  first perf.1 sample already counts gets made before it) to the end: each get starts one segment.
- States per superbasin (the system between two atoms): after n segments in it, S (1 -
  exp(-n / D)) found, S = K0 a^KAPPA (W / 27)^OMEGA, D = DISCOVERY_SEGMENTS (W / 27)^DISCOVERY_DELTA
  with W the workers: least squares on log(1 + states) per whole superbasin, each with its reads
  (gets) and new states (first-time puts) as measured between the times the trajectory crossed
  its two atoms, over the unlimited run (perf.1 DBMemoryGet, DBMemoryPut; W = 251) and both
  traces (their DBMemoryGet and DBMemoryPutUnique; W = 27).
- Bytes of a state's coordinates b(a) = B0 + B1 floor(a): linear least squares of the bytes the
  WorkManager held (perf.1 DBMemorySize) on its keys (DBMemoryMapSize) and on the sum of the
  floor of the atoms at each key's creation (keys added between two samples take the atoms of
  the later one), over every sample from 600 s.

MEASURED vs INFERRED: the counters' meanings are the README's (../shared/results/README.md);
atoms at t is inferred from the trajectory (a = A0 + L / delay, delay = 100,000 from
ps-config.xml, A0 fitted). Python 3 standard library; a few seconds. Missing data is an error
naming the path (exit 2); under CI=true it says so loudly. `--check` exits 1 if the constants in
model.rs differ from the fit by more than their printed rounding.
"""

import argparse
import gzip
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parsplice_counters as pc  # noqa: E402  (the counters' reader, one copy)

DELAY = 100_000.0  # ps of trajectory per atom deposited (<Delay> in ps-config.xml)
# Atoms at trajectory 0: not in these runs' files (times.txt starts at 100 s, past the seed);
# the model's fit to both one-node traces (tools/trajectory_fit.py), which start from the same
# 2-3 atom seed. Left free, this run's fit drives it to 0 (its first row is 1.8 M ps at 100 s).
A0 = 2.62
WORKERS = 252  # Workers in `layout`: 251 under the WorkManager and one under the splicer
WINDOW = 600  # s: the windows of the rate fits
GETS_FROM = 300  # s: perf.1's first sample already counts gets made before it
FIT_RUN = "scale-cachelimit-8n-unlimited-71994"
# The two one-node traces (27 workers under one WorkManager), and their growth delays: they cover
# the small systems the eight-node run passes in its first 100 s, and a ten times slower growth.
TRACES = os.path.join("traces", "parsplice")
TRACE_RUNS = [("d100K", 100_000.0), ("d1M", 1_000_000.0)]
TRACED_WORKERS = 27
MODEL_RS = os.path.join(pc.ROOT, "crates", "parsplice", "src", "model.rs")


def nelder_mead(f, x0, steps, iters=4000, tol=1e-12):
    """Minimises f from x0 (the standard simplex method; no SciPy here)."""
    n = len(x0)
    pts = [list(x0)] + [[x + (s if i == j else 0.0) for j, x in enumerate(x0)]
                        for i, s in enumerate(steps)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= tol * (abs(vals[0]) + tol):
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        xr = [c[j] + (c[j] - pts[-1][j]) for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [c[j] + 2 * (c[j] - pts[-1][j]) for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [c[j] + 0.5 * (pts[-1][j] - c[j]) for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(n)]
                    vals[i] = f(pts[i])
    best = min(range(n + 1), key=lambda i: vals[i])
    return pts[best], vals[best]


# --- the trajectory rate ------------------------------------------------------------------------

def seconds_to(length, r0, ac, gamma, a0):
    """t(L): the closed form of dL/dt = R(a0 + L / DELAY)."""
    a = a0 + length / DELAY
    g1 = gamma + 1.0
    return (length + DELAY * ac / g1 * ((a / ac) ** g1 - (a0 / ac) ** g1)) / r0


def length_at(t, p):
    """L(t): t(L) inverted by bisection (t(L) increases with L)."""
    lo, hi = 0.0, 1.0
    while seconds_to(hi, *p) < t:
        hi *= 2.0
        if hi > 1e12:
            return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if seconds_to(mid, *p) < t:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit_trajectory(rows):
    pts = [(t, l) for t, l, _ in rows if l > 0]

    def loss(p):
        r0, ac, gamma = p
        if r0 <= 0 or ac <= 0 or gamma <= 0:
            return 1e30
        return sum((math.log(length_at(t, (r0, ac, gamma, A0))) - math.log(l)) ** 2
                   for t, l in pts)

    p, _ = nelder_mead(loss, [5554.0, 15.2, 2.78], [500.0, 2.0, 0.3], iters=3000)
    return p + [A0]


# --- per-window rates ---------------------------------------------------------------------------

def load(base, run, with_perf=True):
    rows = read_rows(os.path.join(base, f"{run}.times.txt"))
    if not with_perf:
        return rows, None
    perf = pc.read_perf(os.path.join(base, "perf", run, "perf.1.csv.gz"))
    others = [pc.read_perf(os.path.join(base, "perf", run, f"perf.{i}.csv.gz")) for i in (2, 3)]
    t0 = min(p[0][0] for p in [perf] + others)
    wm = {n: pc.Series(perf, t0, n) for n in perf[0][1]}
    return rows, wm


def read_rows(path):
    with open(path, encoding="utf-8") as f:
        return [tuple(float(x) for x in line.split()[:3]) for line in f if line.strip()]


def column_at(rows, t, col):
    """A times.txt column at t, linear between rows (0 at t = 0)."""
    prev = (0.0, 0.0, 0.0)
    for r in rows:
        if r[0] >= t:
            span = r[0] - prev[0]
            return prev[col] + (r[col] - prev[col]) * ((t - prev[0]) / span if span else 1.0)
        prev = r
    return rows[-1][col]


def windows(rows, wm, until, a0, delay=DELAY, workers=WORKERS):
    """Per WINDOW-s window up to `until`: mean atoms, MD ps/s per worker and, with the
    WorkManager's counters `wm`, MD ps per get (from the second window: the counters' first
    sample already counts gets made before it)."""
    out = []
    t = WINDOW if wm is not None else 0
    end = min(until, rows[-1][0])
    while t + WINDOW <= end:
        a, b = t, t + WINDOW
        atoms = a0 + 0.5 * (column_at(rows, a, 1) + column_at(rows, b, 1)) / delay
        md = (column_at(rows, b, 2) - column_at(rows, a, 2)) / WINDOW
        row = {"t": a, "atoms": atoms, "production": md / workers}
        if wm is not None:
            gets = wm["DBMemoryGet"].rate(a, b)
            row["md_per_get"] = md / gets if gets else None
        out.append(row)
        t += WINDOW
    return out


def production(a, p):
    p0, pa, pg = p
    return p0 / (1.0 + (a / pa) ** pg)


def fit_log(f, pts, x0, steps):
    def loss(p):
        if any(x <= 0 for x in p):
            return 1e30
        return sum((math.log(f(a, p)) - math.log(y)) ** 2 for a, y in pts)

    p, _ = nelder_mead(loss, x0, steps)
    return p


def bytes_samples(rows, wm, a0, until):
    """[(keys held, sum of floor(atoms at creation) over them, bytes held)] from 600 s."""
    keys, size = wm["DBMemoryMapSize"], wm["DBMemorySize"]
    out, atoms_sum, prev = [], 0.0, 0
    for t, k in zip(keys.t, keys.v):
        if t > until:
            break
        added = k - prev
        if added > 0:
            atoms_sum += added * math.floor(a0 + column_at(rows, t, 1) / DELAY)
        prev = k
        if t >= WINDOW:
            out.append((k, atoms_sum, size.gauge(t)[1]))
    return out


def fit_bytes(samples):
    """b0, b1 minimising sum (b0 keys + b1 atoms_sum - bytes)^2 (2x2 normal equations)."""
    sxx = sum(k * k for k, _, _ in samples)
    sxy = sum(k * s for k, s, _ in samples)
    syy = sum(s * s for _, s, _ in samples)
    bx = sum(k * b for k, _, b in samples)
    by = sum(s * b for _, s, b in samples)
    det = sxx * syy - sxy * sxy
    return [(bx * syy - by * sxy) / det, (sxx * by - sxy * bx) / det]


def rms(errors):
    errors = [e for e in errors if e is not None]
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else None


def judge(rows, wm, fits, until, label):
    """The fitted curves against one run, up to `until` s: relative errors."""
    traj, prod, md, byts = (fits[k] for k in ("trajectory", "production", "md_per_get", "bytes"))
    a0 = traj[3]
    out = {"run": label, "until_s": until}
    tr = [(t, l) for t, l, _ in rows if 0 < t <= until and l > 0]
    out["trajectory"] = {f"{h}": length_at(h, traj) / column_at(rows, h, 1) - 1.0
                         for h in (3600, 9000, 15000) if h <= until}
    out["trajectory_rms"] = rms([length_at(t, traj) / l - 1.0 for t, l in tr])
    w = windows(rows, wm, until, a0)
    out["production_rms"] = rms([production(x["atoms"], prod) / x["production"] - 1.0
                                 for x in w if x["production"] > 0])
    if wm is not None:
        out["md_per_get_rms"] = rms([md / x["md_per_get"] - 1.0 for x in w if x["md_per_get"]])
        out["states"] = states_judged(basins_of([r for r in rows if r[0] <= until], DELAY,
                                                Counts.of_perf(wm), WORKERS - 1), fits["states"])
        # Strictly before `until`: the trim's own sample already holds fewer keys.
        s = bytes_samples(rows, wm, a0, until - 1)
        out["bytes_rms"] = rms([(byts[0] * k + byts[1] * a) / b - 1.0 for k, a, b in s if b])
    return out


def analyse(shared):
    base = os.path.join(shared, pc.RESULTS)
    needed = [os.path.join(base, f"{run}.times.txt") for run, _, _ in pc.RUNS]
    needed += [os.path.join(base, "perf", run, f"perf.{i}.csv.gz")
               for run, _, _ in pc.RUNS for i in (1, 2, 3)]
    missing = [p for p in needed if not os.path.isfile(p)]
    if missing:
        pc.fail(f"missing {len(missing)} of the {len(needed)} files, e.g. {missing[0]}")
    rows, wm = load(base, FIT_RUN)
    traj = fit_trajectory(rows)
    a0 = traj[3]
    w = windows(rows, wm, 15000, a0)
    traces = [load_trace(shared, name, delay) for name, delay in TRACE_RUNS]
    prod_pts = [(x["atoms"], x["production"]) for x in w]
    for t in traces:
        prod_pts += [(x["atoms"], x["production"]) for x in t["windows"]]
    prod = fit_log(production, prod_pts, [255.0, 11.23, 1.693], [20.0, 2.0, 0.2])
    basins = basins_of(rows, DELAY, Counts.of_perf(wm), WORKERS - 1)
    for t in traces:
        basins += t["basins"]
    states = fit_states(basins)
    md = ((column_at(rows, wm["DBMemoryGet"].last(), 2) - column_at(rows, GETS_FROM, 2))
          / (wm["DBMemoryGet"].cumulative(wm["DBMemoryGet"].last())
             - wm["DBMemoryGet"].cumulative(GETS_FROM)))
    byts = fit_bytes(bytes_samples(rows, wm, a0, 15000))
    fits = {"trajectory": traj, "production": prod, "md_per_get": md, "bytes": byts,
            "states": states}
    judged = [judge(rows, wm, fits, 15000, f"{FIT_RUN} (fitted on)")]
    for t in traces:
        judged.append({"run": f"{t['name']} trace (states and production fitted on)",
                       "until_s": t["windows"][-1]["t"] + WINDOW,
                       "production_rms": rms([production(x["atoms"], prod) / x["production"] - 1.0
                                              for x in t["windows"] if x["production"] > 0]),
                       "states": states_judged(t["basins"], states)})
    for run, label, policy in pc.RUNS[1:]:
        r, m = load(base, run)
        if policy.startswith("two-phase"):
            until = m["MantlePolicySwitch"].first(lambda v: v >= 1)
        elif policy == "lru-100000":
            until = m["DBMemoryErase"].first(lambda v: v > 0)
        else:
            until = None
        j = judge(r, m, fits, until or 15000, label)
        if until is None:
            # LRU 10's cache acts from the start: only what the workers do is comparable.
            j = {k: v for k, v in j.items()
                 if k in ("run", "until_s", "production_rms", "md_per_get_rms")}
        elif policy == "lru-100000":
            # Trajectory and the workers' rates over the whole run; keys and bytes until the cap.
            whole = judge(r, m, fits, 15000, label)
            for k in ("trajectory", "trajectory_rms", "production_rms", "md_per_get_rms"):
                j[k] = whole[k]
        judged.append(j)
    return {"fitted_on": FIT_RUN, "fits": fits, "judged": judged}


# --- the constants as model.rs spells them -----------------------------------------------------

# --- states per superbasin ------------------------------------------------------------------------

class Counts:
    """Reads (gets) and new states (first-time puts) of one WorkManager so far, at t."""

    def __init__(self, gets, news):
        self.gets, self.news = gets, news

    @staticmethod
    def of_perf(wm):
        return Counts(wm["DBMemoryGet"].cumulative, wm["DBMemoryPut"].cumulative)

    @staticmethod
    def of_trace(path):
        """Per-second cumulative counts of a ParSplice keyspace trace (rank4.csv.gz)."""
        gets, news, t0 = [], [], None
        g = n = 0
        with gzip.open(path, "rt", encoding="ascii") as f:
            for line in f:
                ts, op, _ = line.split(",", 2)
                ts = int(ts)
                if t0 is None:
                    t0 = ts
                while len(gets) <= ts - t0:
                    gets.append(g)
                    news.append(n)
                if op == "DBMemoryGet":
                    g += 1
                elif op == "DBMemoryPutUnique":
                    n += 1
                gets[-1], news[-1] = g, n

        def at(series):
            return lambda t: float(series[min(max(int(t), 0), len(series) - 1)])
        return Counts(at(gets), at(news))


def basins_of(rows, delay, counts, workers):
    """One entry per superbasin (the system between two atoms) the run passed whole after its
    first times.txt row: (atoms, workers, reads in it, new states found in it)."""
    out = []
    first, last = rows[0], rows[-1]
    k = math.floor(A0 + first[1] / delay) + 1
    while True:
        lo, hi = (k - A0) * delay, (k + 1 - A0) * delay
        if hi > last[1]:
            break
        t_lo, t_hi = time_at(rows, lo), time_at(rows, hi)
        out.append((k, workers, counts.gets(t_hi) - counts.gets(t_lo),
                    counts.news(t_hi) - counts.news(t_lo)))
        k += 1
    return out


def time_at(rows, length):
    """When the trajectory reached `length` (linear between rows)."""
    prev = (0.0, 0.0)
    for r in rows:
        if r[1] >= length:
            span = r[1] - prev[1]
            return prev[0] + (r[0] - prev[0]) * ((length - prev[1]) / span if span else 1.0)
        prev = (r[0], r[1])
    return rows[-1][0]


def basin_found(atoms, workers, reads, p):
    """States a superbasin yields after `reads` segments: S (1 - exp(-reads / D)), with
    S = K0 atoms^KAPPA (workers / 27)^OMEGA and D = DISCOVERY_SEGMENTS (workers / 27)^DELTA."""
    k0, kappa, omega, d, delta = p
    scale = workers / TRACED_WORKERS
    return k0 * atoms ** kappa * scale ** omega * (1.0 - math.exp(-reads / (d * scale ** delta)))


def fit_states(basins):
    def loss(p):
        if p[0] <= 0 or p[3] <= 0 or abs(p[4]) > 3:
            return 1e30
        return sum((math.log1p(basin_found(a, w, n, p)) - math.log1p(new)) ** 2
                   for a, w, n, new in basins)

    p, _ = nelder_mead(loss, [0.00025, 4.2, 0.3, 30000.0, 0.0], [0.0001, 0.2, 0.2, 5000.0, 0.3],
                       iters=8000)
    return p


def states_judged(basins, p):
    """The states found in a run's whole superbasins, predicted from the reads each had, against
    the measured: their sums' ratio less 1, and the rms of the per-basin error of log(1 + n)."""
    if not basins:
        return None
    found = sum(new for *_, new in basins)
    predicted = sum(basin_found(a, w, n, p) for a, w, n, _ in basins)
    log_rms = math.sqrt(sum((math.log1p(basin_found(a, w, n, p)) - math.log1p(new)) ** 2
                            for a, w, n, new in basins) / len(basins))
    return {"basins": len(basins), "measured": found, "predicted": predicted,
            "total_error": predicted / found - 1.0 if found else None, "log_rms": log_rms}


def load_trace(shared, name, delay):
    base = os.path.join(shared, TRACES, name)
    rows = read_rows(os.path.join(base, "times.txt"))
    counts = Counts.of_trace(os.path.join(base, "rank4.csv.gz"))
    w = windows(rows, None, rows[-1][0], A0, delay, TRACED_WORKERS)
    return {"name": name, "windows": w, "basins": basins_of(rows, delay, counts, TRACED_WORKERS)}


def constants(fits):
    """(name, value, decimals) of model.rs's fitted constants."""
    r0, ac, gamma, a0 = fits["trajectory"]
    p0, pa, pg = fits["production"]
    b0, b1 = fits["bytes"]
    k0, kappa, omega, d, delta = fits["states"]
    return [("K0", k0, 6), ("KAPPA", kappa, 3), ("OMEGA", omega, 3), ("DISCOVERY_SEGMENTS", d, 0),
            ("DISCOVERY_DELTA", delta, 3),
            ("R0", r0, 0), ("A_C", ac, 3), ("GAMMA", gamma, 3),
            ("P0", p0, 1), ("P_A", pa, 2), ("P_GAMMA", pg, 3),
            ("SEGMENT_MD_PS", fits["md_per_get"], 2),
            ("VALUE_BYTES_BASE", b0, 0), ("VALUE_BYTES_PER_ATOM", b1, 1)]


def check(fits):
    with open(MODEL_RS, encoding="utf-8") as f:
        text = f.read()
    bad = []
    for name, value, decimals in constants(fits):
        m = re.search(rf"pub const {name}: (?:f64|u32) = ([0-9._]+);", text)
        if not m:
            bad.append(f"{name}: not in {MODEL_RS}")
            continue
        have = float(m.group(1).replace("_", ""))
        if abs(have - value) > 0.5 * 10 ** -decimals + 1e-12:
            bad.append(f"{name}: model.rs has {have}, the fit gives {value:.{decimals}f}")
    return bad


def log_rms(st):
    return "—" if not st else f"{st['log_rms']:.2f}"


def pct(x):
    return "—" if x is None else f"{100 * x:+.1f}%"


def pct_abs(x):
    return "—" if x is None else f"{100 * x:.1f}%"


def markdown(d):
    print(f"Fitted on {d['fitted_on']} (production and states also on the traces d100K and "
          "d1M):\n")
    print("| constant (model.rs) | value |")
    print("|---|---|")
    for name, value, decimals in constants(d["fits"]):
        print(f"| `{name}` | {value:,.{decimals}f} |")
    print("\nJudged on the runs not fitted on (model / measured - 1; rms over the 100-s rows for the "
          "trajectory, over 600-s windows for the rates, over the samples for bytes):\n")
    print("| run | until (s) | trajectory 1 h | 2.5 h | 4.2 h | trajectory rms | production rms "
          "| MD per segment rms | states found (whole basins) | per basin, rms of log(1+n) "
          "| bytes held rms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for j in d["judged"]:
        t = j.get("trajectory", {})
        st = j.get("states")
        found = "—" if not st else (f"{st['predicted']:,.0f} / {st['measured']:,.0f} "
                                    f"({pct(st['total_error'])}, {st['basins']} basins)")
        print(f"| {j['run']} | {j['until_s']:,.0f} | {pct(t.get('3600'))} | {pct(t.get('9000'))} "
              f"| {pct(t.get('15000'))} | {pct_abs(j.get('trajectory_rms'))} "
              f"| {pct_abs(j.get('production_rms'))} | {pct_abs(j.get('md_per_get_rms'))} "
              f"| {found} | {log_rms(st)} "
              f"| {pct_abs(j.get('bytes_rms'))} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default=os.path.join(pc.ROOT, "..", "shared"))
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if model.rs's constants are not the fit's")
    args = ap.parse_args()
    d = analyse(args.shared)
    markdown(d)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(d, f, indent=1)
    if args.check:
        bad = check(d["fits"])
        if bad:
            print("\nmodel.rs is not the fit:\n  " + "\n  ".join(bad), file=sys.stderr)
            sys.exit(1)
        print("\nmodel.rs has the fitted constants.")


if __name__ == "__main__":
    main()
