#!/usr/bin/env python3
"""How well the model's former trajectory rate (until 2026-11-28; the model's rate is now fitted to
the eight-node unlimited run by tools/fit/parsplice_model.py) fits the two traced runs: integrates
dL/dt = R(a), R(a) = 5554 / (1 + (a / 15.2)^2.78) ps/s, a = 2.62 + L / delay
(the source of the model's A0 = 2.62 atoms at trajectory 0) from L = 0, and prints
model / real - 1 of the trajectory against each run's `times.txt` (every 100 s), with the largest
deviation over the run. Reads ../shared only; Python 3 standard library; under a second.

    python3 tools/trajectory_fit.py
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = {"d100K": 100_000.0, "d1M": 1_000_000.0}  # growth delay, ps (<Delay> in ps-config.xml)
STEP = 0.1  # s, explicit Euler


def rate(atoms):
    return 5554.0 / (1.0 + (atoms / 15.2) ** 2.78)


def deviations(delay, rows):
    """[(seconds, model / real - 1)] at each row of times.txt."""
    out, length, t = [], 0.0, 0.0
    for seconds, real in rows:
        while t < seconds:
            length += rate(2.62 + length / delay) * STEP
            t += STEP
        if real > 0:
            out.append((seconds, length / real - 1.0))
    return out


def main():
    for run, delay in RUNS.items():
        path = os.path.join(ROOT, "..", "shared", "traces", "parsplice", run, "times.txt")
        with open(path) as f:
            rows = [tuple(map(float, l.split()[:2])) for l in f if l.strip()]
        dev = deviations(delay, rows)
        print(f"{run} (growth delay {delay:,.0f}): model / real - 1 of the trajectory")
        for s, e in dev:
            if s % 1800 == 0 or s == dev[-1][0]:
                print(f"  {s:>8,.0f} s  {100 * e:+5.1f}%")
        for lo, hi in ((0, 600), (600, 3.3 * 3600), (3.3 * 3600, 4.2 * 3600 + 1)):
            sel = [(s, e) for s, e in dev if lo < s <= hi]
            if sel:
                s, e = max(sel, key=lambda x: abs(x[1]))
                print(f"  largest from {lo:,.0f} to {min(hi, dev[-1][0]):,.0f} s: "
                      f"{100 * e:+.1f}% at {s:,.0f} s")


if __name__ == "__main__":
    main()
