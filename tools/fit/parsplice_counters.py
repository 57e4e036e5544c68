#!/usr/bin/env python3
"""What the eight measured ParSplice policy runs' own counters say (issue 36, first slice).

Reads, for each run of ../shared/results/parsplice-8node-policies/ (growth delay 100,000, 8 nodes,
one cache policy each), its `times.txt` and its periodic counters `perf/<run>/perf.{1,2,3}.csv.gz`
(../shared/results/README.md says what each file and counter is), and prints markdown tables on
stdout (`--json FILE` writes every number as JSON too). Python 3 standard library; a few seconds.

    python3 tools/fit/parsplice_counters.py [--shared DIR] [--json FILE]

DIR is the directory holding `results/` (default: ../shared beside the repository). Missing data
is an error naming the missing path (exit 2); under CI=true the message says so loudly.

MEASURED (read off the files, no model, nothing fitted or tuned):
- t = unix_ts - the run's first timestamp over its three perf files (they start within 5 s of
  each other). times.txt has its own clock (every 100 s); the README estimates the two agree
  within about 10 s.
- trajectory: times.txt's second column at 3,600 s (1 h), 9,000 s (2.5 h) and 15,000 s (4.2 h).
- keys held / bytes held: perf.1's (the WorkManager's, rank 4) gauges DBMemoryMapSize and
  DBMemorySize at the last sample at or before 3,600 s, 9,000 s and 15,000 s (or the run's last
  sample, which is up to 10 s earlier); the InMemoryDB's (perf.3, rank 3) DBMemoryMapSize the same
  way. Bytes per key = bytes held / keys held.
- rates: a cumulative counter's increase over a window divided by its length, the counter read at
  the window's ends by linear interpolation between the samples around them. WorkManager gets and
  puts: perf.1 DBMemoryGet, DBMemoryPut; first-time puts: perf.1 DBMemoryPutUnique (equal to
  DBMemoryPut in every sample of every run: the script checks and reports it); evictions: perf.1
  DBMemoryErase; LevelDB: perf.2 LDBPut, LDBGet; InMemoryDB: perf.3 DBMemoryPut, DBMemoryGet.
  A window from 0 counts from the file's first sample (perf.1's first already counts
  25,000-27,000 gets made before it, which no window includes). The windows are the same for
  every run: 0-3,600; 3,600-6,600 (before any trim: the earliest is at 6,680 s); 6,600-7,400
  (the trims); 7,400-9,000; 9,000-12,000; 12,000-end.
- trim: the first perf.1 sample with MantlePolicySwitch = 1 (it goes 0 -> 1 once, in the four
  two-phase runs), with the keys held just before and after; first eviction: the first perf.1
  sample with DBMemoryErase > 0 (the trim, or a cap being reached).
- LevelDB after the trim: LevelDB puts/s and gets/s from 3,600 s to the trim, then from the trim
  to 400 s after it, from there to 2,000 s after it, and from there to the end.
- last LevelDB get: the t of the last perf.2 sample whose LDBGet is larger than the sample
  before's (the get happened in the 10-16 s before it).
- stop: a run's trajectory stops growing at t_stop when t_stop is the last times.txt row whose
  length is larger than the row before's (so the length is exactly unchanged from t_stop to the
  end) and that flat tail lasts at least 1,800 s; otherwise the run grows to the end (no stop).
  A looser variant, printed beside it, counts only growth of more than 1% of the run's mean
  growth per 100 s over the hour before (`stop_1pct_s`); in these eight runs the two agree.
- growth vs LevelDB gets: the 100-s rows of times.txt from a run's first eviction on, counted by
  whether the trajectory grew in them and whether perf.2's LDBGet rose between its samples at or
  before the row's two ends (so a get up to ~16 s before a row's start may count in it).
- the unlimited run (scale-cachelimit-8n-unlimited-71994): keys and bytes held every 1,800 s, and
  the WorkManager's, LevelDB's and InMemoryDB's rates in the windows above.

INFERRED (not measured; the README beside the data says why): that perf.1/2/3 are ranks 4/2/3;
that DBMemoryMapSize is keys held and DBMemorySize bytes held; that times.txt's and the counters'
clocks agree within ~10 s; that a get counted in perf.1 is a worker reading a state (hits and
misses are not separated). The one fitted curve, keys held by the unlimited run over time as
keys = a * (t / 3600 s)^b (least squares on log keys, samples from 1,800 s on), is a description
of that run, with its rms error printed; nothing in the model uses it yet.
"""

import argparse
import gzip
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join("results", "parsplice-8node-policies")
# (run folder, short label, policy). The unlimited run, the baseline, comes first.
RUNS = [
    ("scale-cachelimit-8n-unlimited-71994", "unlimited", "unlimited"),
    ("scale-cachelimit-8n-100000-71993", "cap 100,000 (71993)", "lru-100000"),
    ("scale-cachelimit-8n-100000-72005-LRU", "cap 100,000 (72005-LRU)", "lru-100000"),
    ("scale-cachelimit-8n-10-72001-LRU", "LRU 10", "lru-10"),
    ("scale-cachedecrease-8n-10-72376", "two-phase 100K → 10", "two-phase-100000-10"),
    ("scale-cachedecrease-8n-100-72372", "two-phase 100K → 100", "two-phase-100000-100"),
    ("scale-cachedecrease-8n-1000-72378", "two-phase 100K → 1,000", "two-phase-100000-1000"),
    ("scale-cachedecrease-8n-10000-72374", "two-phase 100K → 10,000", "two-phase-100000-10000"),
]
AT = [3600, 9000, 15000]  # s: 1 h, 2.5 h, 4.2 h
END = 15000  # s: the runs' time limit; a window ending here ends at the last sample
WINDOWS = [(0, 3600), (3600, 6600), (6600, 7400), (7400, 9000), (9000, 12000), (12000, END)]
FLAT_TAIL = 1800  # s: a run whose trajectory is flat this long before its end has stopped
LOOSE = 0.01  # the loose stop counts growth above 1% of the mean per 100 s over the hour before
AFTER_TRIM = [400, 2000]  # s after the trim: the windows of LevelDB traffic after it
SERIES_EVERY = 1800  # s: the unlimited run's keys and bytes held
FIT_FROM = 1800  # s: the keys-held fit's first sample


def fail(message):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        message = "CI: the measured data must be beside the repository. " + message
        print("!" * 72, file=sys.stderr)
    print(f"parsplice_counters.py: {message}", file=sys.stderr)
    if message.startswith("CI:"):
        print("!" * 72, file=sys.stderr)
    sys.exit(2)


def read_times(path):
    with open(path, encoding="utf-8") as f:
        return [tuple(float(x) for x in line.split()[:2]) for line in f if line.strip()]


def read_perf(path):
    """[(unix_ts, {counter: value})], one entry a sample (the 25 counters of one timestamp)."""
    samples = []
    with gzip.open(path, "rt", encoding="ascii") as f:
        for line in f:
            ts, name, value = line.strip().split(",")
            ts, value = int(ts), int(value)
            if not samples or samples[-1][0] != ts or name in samples[-1][1]:
                samples.append((ts, {}))
            samples[-1][1][name] = value
    return samples


class Series:
    """One counter of one file over t (seconds from the run's start)."""

    def __init__(self, samples, t0, name):
        self.t = [ts - t0 for ts, _ in samples]
        self.v = [c[name] for _, c in samples]

    def last(self):
        return self.t[-1]

    def gauge(self, at):
        """(t, value) of the last sample at or before `at` (the first if none)."""
        i = max(0, bisect_right(self.t, at) - 1)
        return self.t[i], self.v[i]

    def cumulative(self, at):
        """A cumulative counter at `at`, linear between the samples around it; the first
        sample's value before it, the last's after it."""
        t, v = self.t, self.v
        if at <= t[0]:
            return float(v[0])
        if at >= t[-1]:
            return float(v[-1])
        i = bisect_right(t, at)
        a, b = t[i - 1], t[i]
        return v[i - 1] + (v[i] - v[i - 1]) * (at - a) / (b - a)

    def rate(self, a, b):
        """Increase per second from a to b (b clamped to the last sample)."""
        b = min(b, self.last())
        if b <= a:
            return None
        return (self.cumulative(b) - self.cumulative(a)) / (b - a)

    def first(self, pred):
        return next((t for t, v in zip(self.t, self.v) if pred(v)), None)

    def last_increase(self):
        out = None
        for i in range(1, len(self.v)):
            if self.v[i] > self.v[i - 1]:
                out = self.t[i]
        return out


def bisect_right(xs, x):
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < xs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def trajectory_at(rows, at):
    """times.txt's length at `at`, linear between rows (the last row past the end)."""
    if at >= rows[-1][0]:
        return rows[-1][1]
    prev = (0.0, 0.0)
    for t, length in rows:
        if t >= at:
            return prev[1] + (length - prev[1]) * (at - prev[0]) / (t - prev[0])
        prev = (t, length)
    return rows[-1][1]


def stop_time(rows, loose):
    """See the header: the last row whose growth counts, if the flat tail after it is long."""
    last = None
    for i in range(1, len(rows)):
        t, grown = rows[i][0], rows[i][1] - rows[i - 1][1]
        threshold = 0.0
        if loose:
            before = [r for r in rows[: i] if r[0] >= t - 3600 - 100]
            if len(before) >= 2:
                per100 = (before[-1][1] - before[0][1]) / (before[-1][0] - before[0][0]) * 100
                threshold = LOOSE * per100
        if grown > threshold:
            last = t
    if last is None or rows[-1][0] - last < FLAT_TAIL:
        return None
    return last


def growth_vs_gets(rows, gets, since):
    """The 100-s rows of times.txt after `since` (the first eviction), counted by whether the
    trajectory grew in them and whether LevelDB served a get in them."""
    if since is None:
        return None
    out = {"grew_with_gets": 0, "grew_without": 0, "flat_with_gets": 0, "flat_without": 0}
    for (a, la), (b, lb) in zip(rows, rows[1:]):
        if a < since:
            continue
        got = gets.gauge(b)[1] > gets.gauge(a)[1]
        key = ("grew" if lb > la else "flat") + ("_with_gets" if got else "_without")
        out[key] += 1
    return out


def window_name(a, b):
    return f"{a}-{b if b < END else 'end'}"


def analyse(shared):
    base = os.path.join(shared, RESULTS)
    if not os.path.isdir(base):
        fail(f"missing {base} (the measured ParSplice policy runs; see results/README.md there)")
    needed = []
    for run, _, _ in RUNS:
        needed.append(os.path.join(base, f"{run}.times.txt"))
        needed += [os.path.join(base, "perf", run, f"perf.{i}.csv.gz") for i in (1, 2, 3)]
    missing = [p for p in needed if not os.path.isfile(p)]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        fail(f"missing {len(missing)} of the {len(needed)} files: " + ", ".join(missing[:3]) + more)

    out = {
        "source": os.path.abspath(base),
        "at_s": AT,
        "windows_s": [[a, b] for a, b in WINDOWS],
        "definitions": {
            "t": "unix_ts minus the run's first timestamp over perf.1/2/3",
            "keys_held": "perf.1 DBMemoryMapSize, last sample at or before t",
            "bytes_held": "perf.1 DBMemorySize, last sample at or before t",
            "rate": "increase of a cumulative counter over the window / its length",
            "stop_s": "last times.txt row whose length grew, if flat >= "
                      f"{FLAT_TAIL} s after it to the end; null: grows to the end",
            "stop_1pct_s": f"the same counting only growth > {LOOSE:.0%} of the mean per 100 s "
                           "over the hour before",
            "trim_s": "first perf.1 sample with MantlePolicySwitch = 1",
            "last_ldb_get_s": "last perf.2 sample whose LDBGet grew",
        },
        "runs": [],
    }
    for run, label, policy in RUNS:
        rows = read_times(os.path.join(base, f"{run}.times.txt"))
        perf = [read_perf(os.path.join(base, "perf", run, f"perf.{i}.csv.gz")) for i in (1, 2, 3)]
        t0 = min(p[0][0] for p in perf)
        wm = {n: Series(perf[0], t0, n) for n in perf[0][0][1]}
        ldb = {n: Series(perf[1], t0, n) for n in perf[1][0][1]}
        imdb = {n: Series(perf[2], t0, n) for n in perf[2][0][1]}
        r = {"run": run, "label": label, "policy": policy,
             "last_sample_s": wm["DBMemoryPut"].last(),
             "samples": [len(p) for p in perf],
             "put_unique_equals_put": wm["DBMemoryPutUnique"].v == wm["DBMemoryPut"].v}
        r["trajectory"] = {str(a): trajectory_at(rows, a) for a in AT}
        r["keys_held"], r["bytes_held"], r["bytes_per_key"], r["imdb_keys_held"] = {}, {}, {}, {}
        r["sampled_at_s"] = {}
        for a in AT:
            ts, keys = wm["DBMemoryMapSize"].gauge(a)
            _, size = wm["DBMemorySize"].gauge(a)
            r["sampled_at_s"][str(a)] = ts
            r["keys_held"][str(a)] = keys
            r["bytes_held"][str(a)] = size
            r["bytes_per_key"][str(a)] = size / keys if keys else None
            r["imdb_keys_held"][str(a)] = imdb["DBMemoryMapSize"].gauge(a)[1]
        r["stop_s"] = stop_time(rows, loose=False)
        r["stop_1pct_s"] = stop_time(rows, loose=True)
        r["trajectory_at_stop"] = trajectory_at(rows, r["stop_s"]) if r["stop_s"] else None
        r["trim_s"] = wm["MantlePolicySwitch"].first(lambda v: v >= 1)
        r["trim_s_imdb"] = imdb["MantlePolicySwitch"].first(lambda v: v >= 1)
        r["first_eviction_s"] = wm["DBMemoryErase"].first(lambda v: v > 0)
        if r["trim_s"] is not None:
            i = wm["MantlePolicySwitch"].t.index(r["trim_s"])
            r["keys_before_trim"] = wm["DBMemoryMapSize"].v[max(0, i - 1)]
            held = wm["DBMemoryMapSize"].v
            r["keys_after_trim"] = held[min(i + 1, len(held) - 1)]
        r["last_ldb_get_s"] = ldb["LDBGet"].last_increase()
        r["ldb_gets_total"] = ldb["LDBGet"].v[-1]
        r["ldb_puts_total"] = ldb["LDBPut"].v[-1]
        r["wm_gets_total"] = wm["DBMemoryGet"].v[-1]
        r["wm_puts_total"] = wm["DBMemoryPut"].v[-1]
        r["stop_minus_last_ldb_get_s"] = (
            r["stop_s"] - r["last_ldb_get_s"]
            if r["stop_s"] is not None and r["last_ldb_get_s"] is not None else None)
        r["rates"] = {}
        for a, b in WINDOWS:
            r["rates"][window_name(a, b)] = {
                "wm_gets_per_s": wm["DBMemoryGet"].rate(a, b),
                "wm_puts_per_s": wm["DBMemoryPut"].rate(a, b),
                "wm_first_puts_per_s": wm["DBMemoryPutUnique"].rate(a, b),
                "wm_evictions_per_s": wm["DBMemoryErase"].rate(a, b),
                "ldb_puts_per_s": ldb["LDBPut"].rate(a, b),
                "ldb_gets_per_s": ldb["LDBGet"].rate(a, b),
                "imdb_puts_per_s": imdb["DBMemoryPut"].rate(a, b),
                "imdb_gets_per_s": imdb["DBMemoryGet"].rate(a, b),
                "trajectory_per_s": (trajectory_at(rows, min(b, rows[-1][0]))
                                     - trajectory_at(rows, a)) / (min(b, rows[-1][0]) - a),
            }
        if r["trim_s"] is not None:
            trim = r["trim_s"]
            edges = [(3600, trim), (trim, trim + AFTER_TRIM[0]),
                     (trim + AFTER_TRIM[0], trim + AFTER_TRIM[1]), (trim + AFTER_TRIM[1], END)]
            r["ldb_around_trim"] = [
                {"from_s": a, "to_s": min(b, ldb["LDBPut"].last()),
                 "ldb_puts_per_s": ldb["LDBPut"].rate(a, b),
                 "ldb_gets_per_s": ldb["LDBGet"].rate(a, b),
                 "ldb_gets": ldb["LDBGet"].cumulative(min(b, ldb["LDBGet"].last()))
                 - ldb["LDBGet"].cumulative(a)}
                for a, b in edges]
        r["growth_vs_ldb_gets"] = growth_vs_gets(rows, ldb["LDBGet"], r["first_eviction_s"])
        # States the InMemoryDB was given that LevelDB never was: its puts less LevelDB's, at the
        # hour marks, at the trim (the sample before it) and at the end.
        marks = [("1 h", 3600), ("2 h", 7200)]
        if r["trim_s"] is not None:
            marks.append(("trim", r["trim_s"] - 1))
        marks += [("3 h", 10800), ("end", END)]
        r["unstored"] = []
        for name, at in marks:
            given = imdb["DBMemoryPut"].cumulative(min(at, imdb["DBMemoryPut"].last()))
            stored = ldb["LDBPut"].cumulative(min(at, ldb["LDBPut"].last()))
            r["unstored"].append({"at": name, "t_s": at, "imdb_puts": given,
                                  "ldb_puts": stored, "missing": given - stored,
                                  "missing_share": (given - stored) / given if given else None})
        if r["trim_s"] is not None and r["stop_s"] is not None:
            gets = ldb["LDBGet"]
            r["ldb_gets_trim_to_stop"] = gets.cumulative(r["stop_s"]) - gets.cumulative(r["trim_s"])
        if policy == "unlimited":
            keys = wm["DBMemoryMapSize"]
            size = wm["DBMemorySize"]
            series = []
            for a in range(SERIES_EVERY, END + 1, SERIES_EVERY):
                ts, k = keys.gauge(a)
                series.append({"t_s": a, "sampled_at_s": ts, "keys_held": k,
                               "bytes_held": size.gauge(a)[1],
                               "imdb_keys_held": imdb["DBMemoryMapSize"].gauge(a)[1],
                               "trajectory": trajectory_at(rows, a)})
            r["series"] = series
            pts = [(math.log(t / 3600), math.log(k)) for t, k in zip(keys.t, keys.v)
                   if t >= FIT_FROM and k > 0]
            n = len(pts)
            mx = sum(x for x, _ in pts) / n
            my = sum(y for _, y in pts) / n
            b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
            a = math.exp(my - b * mx)
            rms = math.sqrt(sum((math.exp(y) / (a * math.exp(b * x)) - 1) ** 2
                                for x, y in pts) / n)
            r["keys_fit"] = {"form": "keys = a * (t / 3600 s)^b", "a": a, "b": b,
                             "from_s": FIT_FROM, "samples": n, "rms_relative_error": rms}
        out["runs"].append(r)
    return out


def fmt(x, digits=0):
    if x is None:
        return "—"
    if isinstance(x, float) and digits:
        return f"{x:,.{digits}f}"
    return f"{round(x):,}"


def mb(x):
    return f"{x / 1e6:,.1f}"


def markdown(d):
    runs = d["runs"]
    lines = []
    w = lines.append
    w("Per run: trajectory (ps), the WorkManager's keys and bytes held (perf.1), stop, trim and "
      "last LevelDB get (s):")
    w("")
    w("| run | trajectory 1 h | 2.5 h | 4.2 h | keys held 1 h | 2.5 h | 4.2 h | MB held 1 h "
      "| 2.5 h | 4.2 h | bytes/key 4.2 h | stop | trim | last LevelDB get | stop − last get |")
    w("|---|" + "---|" * 14)
    for r in runs:
        cells = [r["label"]]
        cells += [fmt(r["trajectory"][str(a)]) for a in AT]
        cells += [fmt(r["keys_held"][str(a)]) for a in AT]
        cells += [mb(r["bytes_held"][str(a)]) for a in AT]
        cells.append(fmt(r["bytes_per_key"]["15000"]))
        cells.append(fmt(r["stop_s"]) if r["stop_s"] else "grows to the end")
        cells.append(fmt(r["trim_s"]))
        cells.append(fmt(r["last_ldb_get_s"]))
        cells.append(fmt(r["stop_minus_last_ldb_get_s"]))
        w("| " + " | ".join(cells) + " |")
    w("")
    agree = all(r["stop_s"] == r["stop_1pct_s"] for r in runs)
    w(f"The loose stop (growth > {LOOSE:.0%} of the hour before's mean) "
      + ("agrees in every run." if agree else "differs: " + ", ".join(
          f"{r['label']} {fmt(r['stop_1pct_s'])}" for r in runs
          if r["stop_s"] != r["stop_1pct_s"])))
    unique = all(r["put_unique_equals_put"] for r in runs)
    w(f"DBMemoryPutUnique = DBMemoryPut in every sample of every run: {'yes' if unique else 'no'}.")
    w("")
    names = [window_name(a, b) for a, b in WINDOWS]
    for key, title, digits in [
        ("wm_gets_per_s", "WorkManager gets/s (perf.1 DBMemoryGet)", 0),
        ("wm_puts_per_s", "WorkManager puts/s (perf.1 DBMemoryPut = first-time puts)", 1),
        ("wm_evictions_per_s", "WorkManager evictions/s (perf.1 DBMemoryErase)", 1),
        ("ldb_puts_per_s", "LevelDB puts/s (perf.2 LDBPut)", 1),
        ("ldb_gets_per_s", "LevelDB gets/s (perf.2 LDBGet)", 3),
        ("imdb_gets_per_s", "InMemoryDB gets/s (perf.3 DBMemoryGet)", 1),
        ("trajectory_per_s", "Trajectory ps/s (times.txt)", 0),
    ]:
        w(f"{title}, by window (s):")
        w("")
        w("| run | " + " | ".join(names) + " |")
        w("|---|" + "---|" * len(names))
        for r in runs:
            w("| " + r["label"] + " | " + " | ".join(
                fmt(r["rates"][n][key], digits) if digits else fmt(r["rates"][n][key])
                for n in names) + " |")
        w("")
    w("The 100-s rows of times.txt from the first eviction on, by whether the trajectory grew and "
      "whether LevelDB served a get in them (perf.2 LDBGet rose between the samples at or before "
      "the row's ends):")
    w("")
    w("| run | first eviction (s) | rows | grew, with gets | grew, none | flat, with gets "
      "| flat, none |")
    w("|---|---|---|---|---|---|---|")
    for r in runs:
        g = r["growth_vs_ldb_gets"]
        if g is None:
            continue
        cells = [r["label"], fmt(r["first_eviction_s"]), fmt(sum(g.values()))]
        cells += [fmt(g[k]) for k in ("grew_with_gets", "grew_without", "flat_with_gets",
                                      "flat_without")]
        w("| " + " | ".join(cells) + " |")
    w("")
    w("States that reached the InMemoryDB but not LevelDB (perf.3 DBMemoryPut − perf.2 LDBPut, "
      "and that as a share of the former):")
    w("")
    w("| run | 1 h | 2 h | before the trim | 3 h | end |")
    w("|---|---|---|---|---|---|")
    for r in runs:
        by = {u["at"]: u for u in r["unstored"]}
        cells = [r["label"]]
        for name in ("1 h", "2 h", "trim", "3 h", "end"):
            u = by.get(name)
            cells.append("—" if u is None else
                         f"{fmt(u['missing'])} ({100 * u['missing_share']:.1f}%)")
        w("| " + " | ".join(cells) + " |")
    w("")
    stops = [r for r in runs if r.get("ldb_gets_trim_to_stop") is not None]
    if stops:
        total = sum(r["ldb_gets_trim_to_stop"] for r in stops)
        w("LevelDB gets from the trim to the stop: " + ", ".join(
            f"{r['label']} {fmt(r['ldb_gets_trim_to_stop'])}" for r in stops)
          + f"; {fmt(total)} for {len(stops)} stops, one stop in {total / len(stops):,.0f} gets "
          f"({100 * len(stops) / total:.2f}% a get).")
        w("")
    w(f"LevelDB around the trim (puts/s, gets/s, gets): from 3,600 s to the trim, then "
      f"+{AFTER_TRIM[0]} s, +{AFTER_TRIM[1]:,} s, the end:")
    w("")
    w("| run | trim | keys before → after | before | trim → +400 | +400 → +2,000 "
      "| +2,000 → end |")
    w("|---|---|---|---|---|---|---|")
    for r in runs:
        if r["trim_s"] is None:
            continue
        cells = [r["label"], fmt(r["trim_s"]),
                 f"{fmt(r['keys_before_trim'])} → {fmt(r['keys_after_trim'])}"]
        for x in r["ldb_around_trim"]:
            cells.append(f"{x['ldb_puts_per_s']:.1f}, {x['ldb_gets_per_s']:.3f}, "
                         f"{fmt(x['ldb_gets'])}")
        w("| " + " | ".join(cells) + " |")
    w("")
    for r in runs:
        if "series" not in r:
            continue
        w(f"The unlimited run ({r['run']}) over time:")
        w("")
        w("| t (s) | trajectory | keys held | MB held | bytes/key | InMemoryDB keys |")
        w("|---|---|---|---|---|---|")
        for s in r["series"]:
            w(f"| {fmt(s['t_s'])} | {fmt(s['trajectory'])} | {fmt(s['keys_held'])} | "
              f"{mb(s['bytes_held'])} | {fmt(s['bytes_held'] / s['keys_held'])} | "
              f"{fmt(s['imdb_keys_held'])} |")
        w("")
        f = r["keys_fit"]
        w(f"Keys held ≈ {f['a']:,.0f} · (t / 1 h)^{f['b']:.3f} (least squares on log keys, "
          f"{f['samples']} samples from {f['from_s']:,} s; "
          f"rms error {f['rms_relative_error']:.1%}).")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"),
                    help="the directory holding results/ (default: ../shared beside the repo)")
    ap.add_argument("--json", metavar="FILE", help="also write every number as JSON")
    args = ap.parse_args()
    d = analyse(args.shared)
    print(markdown(d))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(d, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
