#!/usr/bin/env python3
"""`auto` over seeds, on the runs it was designed on and on a hold-out it never saw (issue 36:
"auto judged fairly: >= 5 seeds per configuration (mean and spread in the tables), and a
hold-out — configurations ... not used while designing it, named before you start and kept
back").

    python3 tools/bench/auto_seeds.py [--binary PATH] [--seeds N] [--only design|holdout]
                                      [--config NAME] [--policy LABEL] [--json FILE]

Each configuration runs `pliant demo --json --seed S` (the whole demo: every fixed policy and the
front sweep, so that `auto`'s distance to the front is measured against the same seed's front)
for seeds 1..N (default 5) and prints, per configuration, `auto`'s efficiency, final and mean
memory (as fractions of the unlimited cache's) and its distance below the front on final and on
mean memory (`below_front_final`, `below_front_mean`: a positive number is points below the
front, 0 on or above it): the mean, the sample standard deviation and the worst over the seeds.

DESIGN: the four model runs `auto` was designed and judged on until 2026-11-28 (growth 100,000
and 1,000,000, 2.5 h and 4.2 h, one seed). HOLDOUT, named on 2026-11-28 before any of its runs
was made, and not to be used to change `auto` or the model: growth 50,000, 300,000 and 3,000,000
(2.5 h), and temperature 0.8 and 1.2 at growth 100,000 (2.5 h). All on `pliant demo`'s defaults
(the measured runs' layout; nothing set per run). About 30 minutes on a 2-core machine for both.
`--policy LABEL` judges another policy of the demo the same way (e.g. `no-progress-100000-10`,
the shipped `parsplice-no-progress` as the study runs it), `--config NAME` runs only the
configurations whose name contains NAME (e.g. `--only design --config "100,000, 4.2 h"`).
Python 3 standard library.
"""

import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DESIGN = {
    "growth 100,000, 2.5 h": [],
    "growth 100,000, 4.2 h": ["--hours", "4.2"],
    "growth 1,000,000, 2.5 h": ["--growth", "1000000"],
    "growth 1,000,000, 4.2 h": ["--growth", "1000000", "--hours", "4.2"],
}
HOLDOUT = {
    "growth 50,000, 2.5 h": ["--growth", "50000"],
    "growth 300,000, 2.5 h": ["--growth", "300000"],
    "growth 3,000,000, 2.5 h": ["--growth", "3000000"],
    "temperature 0.8, growth 100,000, 2.5 h": ["--temperature", "0.8"],
    "temperature 1.2, growth 100,000, 2.5 h": ["--temperature", "1.2"],
}
FIELDS = [("efficiency", "efficiency", 100.0, "%"),
          ("memory_fraction", "final memory", 100.0, "%"),
          ("mean_fraction", "mean memory", 100.0, "%"),
          ("below_front_final", "below the front, final", 100.0, " pt"),
          ("below_front_mean", "below the front, mean", 100.0, " pt")]
GOAL = 0.96  # pliant_tier::auto::EFFICIENCY, the objective `auto` runs with by default
RUN_TIMEOUT = 900  # s, one demo


def demo(binary, args, seed, policy):
    cmd = [binary, "demo", "--json", "--seed", str(seed), *args]
    with_dir = os.path.join(ROOT, "target", "auto-seeds-report")
    try:
        p = subprocess.run(cmd + ["--report", with_dir], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT, cwd=ROOT)
    except subprocess.TimeoutExpired:
        sys.exit(f"{' '.join(cmd)}: more than {RUN_TIMEOUT} s")
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    data = json.loads(p.stdout)
    return next(r for r in data["policies"] if r["policy"] == policy)


def stats(xs):
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return mean, sd


def table(name, configs, runs, policy, goal):
    print(f"{name}: `{policy}` over seeds 1..{len(next(iter(runs.values())))} "
          "(mean ± standard deviation; worst)\n")
    print("| configuration | " + " | ".join(label for _, label, _, _ in FIELDS) + " |")
    print("|---|" + "---|" * len(FIELDS))
    for c in configs:
        cells = []
        for key, _, scale, unit in FIELDS:
            xs = [scale * (r.get(key) or 0.0) for r in runs[c]]
            mean, sd = stats(xs)
            worst = min(xs) if key == "efficiency" else max(xs)
            cells.append(f"{mean:.2f} ± {sd:.2f}{unit}; {worst:.2f}")
        print(f"| {c} | " + " | ".join(cells) + " |")
    effs = [r["efficiency"] for c in configs for r in runs[c]]
    met = sum(e >= goal for e in effs)
    mean = 100 * sum(effs) / len(effs)
    print(f"\n{met} of {len(effs)} runs at or above {goal:.0%}; lowest {100 * min(effs):.2f}%; "
          f"mean {mean:.2f}%.\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "pliant"),
                    help="the pliant binary (default: this checkout's release build)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--only", choices=["design", "holdout"])
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--policy", default="auto", help="the demo policy judged (default: auto)")
    ap.add_argument("--config", help="only the configurations whose name contains this")
    ap.add_argument("--goal", type=float, default=GOAL,
                    help=f"the efficiency counted as met (default {GOAL}, auto's objective)")
    a = ap.parse_args()
    if a.seeds < 2:
        sys.exit("--seeds: at least 2, for a spread")
    if not os.access(a.binary, os.X_OK):
        sys.exit(f"{a.binary}: not an executable (cargo build --release, or --binary PATH)")
    sets = [("design", DESIGN), ("holdout", HOLDOUT)]
    if a.only:
        sets = [s for s in sets if s[0] == a.only]
    out = {}
    for name, configs in sets:
        if a.config:
            configs = {c: v for c, v in configs.items() if a.config in c}
        if not configs:
            continue
        runs = {}
        for c, args in configs.items():
            runs[c] = []
            for seed in range(1, a.seeds + 1):
                print(f"{name}: {c}, seed {seed} …", file=sys.stderr, flush=True)
                runs[c].append(demo(a.binary, args, seed, a.policy))
        table("Designed on" if name == "design" else "Hold-out", list(configs), runs, a.policy,
              a.goal)
        out[name] = {c: runs[c] for c in configs}
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
