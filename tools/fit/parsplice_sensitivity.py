#!/usr/bin/env python3
"""How the model-vs-measured comparison moves when one of the model's unsourced constants is set
to half and one and a half times its value (issue 36: "the result's sensitivity to ±50%").

    python3 tools/fit/parsplice_sensitivity.py [--binary PATH] [--json FILE] [--knobs A,B,...]
                                               [--seeds 1,2,3]

Runs `pliant parsplice compare --json` once as it is and once per knob and factor (`--set
NAME=VALUE`; a chance above 1 is set to 1), and prints, per knob, how many points each policy's
modelled efficiency moves at 2.5 h and 4.2 h: the largest move over the seven limited policies,
and LRU 10's and two-phase 100K → 10's. The knobs' values are read from
crates/parsplice/src/model.rs (`p_hop`, fitted to 0, is left out: half and one and a half times 0
are 0). The rates and sizes fitted to the measured runs are varied by their scales and offsets
(`R0`, `A0`, `P0`, `SEGMENT_MD_PS`, `K0`, `DISCOVERY_SEGMENTS`, `VALUE_BYTES_*`): an exponent
at ±50% changes its function by orders of magnitude at the runs' 30–60 atoms, and the scale
fitted with it carries the fit's uncertainty there. About 45 minutes on a 2-core machine (39
model comparisons); `--knobs` runs only those named (and the base run). `--seeds` runs each
comparison once per seed and gives each move as its mean over the seeds, each seed's knob run
against the same seed's base run (a paired difference: one seed's stalls move results by 4–6
points whatever the knob), with the standard deviation over the seeds beside it.
Needs ../shared/results/parsplice-8node-policies (the comparison's measured runs).
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_RS = os.path.join(ROOT, "crates", "parsplice", "src", "model.rs")
# knob: how its value is found in model.rs (a const, or a field of StoreParams' default)
KNOBS = {
    "p_current": r"pub const P_CURRENT: f64 = ([0-9.]+);",
    "p_move": r"pub const P_MOVE: f64 = ([0-9.]+);",
    "recency_shape": r"pub const RECENCY_SHAPE: f64 = ([0-9.]+);",
    "lost_share": r"pub const LOST_SHARE: f64 = ([0-9.]+);",
    "heal_scale": r"pub const HEAL_SCALE: f64 = ([0-9.]+);",
    "heal_decay_segments": r"pub const HEAL_DECAY_SEGMENTS: f64 = ([0-9._]+);",
    "miss_penalty": r"pub const READ_LATENCY_SECONDS: f64 = ([0-9.]+);",
    "store_network_seconds": r"pub const STORE_NETWORK_SECONDS: f64 = ([0-9.]+);",
    "store_reads_per_s": r"reads_per_s: ([0-9.]+),",
    "store_puts_per_s": r"puts_per_s: ([0-9.]+),",
    "store_stall_seconds": r"stall_seconds: ([0-9.]+),",
    # The rates and sizes fitted to the measured runs: their scales and offsets (`model::Fitted`).
    "r0": r"pub const R0: f64 = ([0-9._]+);",
    "a0": r"pub const A0: f64 = ([0-9._]+);",
    "p0": r"pub const P0: f64 = ([0-9._]+);",
    "segment_md_ps": r"pub const SEGMENT_MD_PS: f64 = ([0-9._]+);",
    "k0": r"pub const K0: f64 = ([0-9._]+);",
    "discovery_segments": r"pub const DISCOVERY_SEGMENTS: f64 = ([0-9._]+);",
    "value_bytes_base": r"pub const VALUE_BYTES_BASE: f64 = ([0-9._]+);",
    "value_bytes_per_atom": r"pub const VALUE_BYTES_PER_ATOM: f64 = ([0-9._]+);",
}
CHANCES = ("p_current", "p_move", "lost_share")
FACTORS = (0.5, 1.5)


def compare(binary, sets, seed=1):
    cmd = [binary, "parsplice", "compare", "--json", "--seed", str(seed)]
    for k, v in sets:
        cmd += ["--set", f"{k}={v}"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return {r["policy"]: (r["model_2_5h"], r["model_4_2h"]) for r in json.loads(p.stdout)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "pliant"))
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--knobs", help="comma-separated knobs to vary (default: all)")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds (default: 1)")
    a = ap.parse_args()
    try:
        seeds = [int(x) for x in a.seeds.split(",")]
    except ValueError:
        sys.exit(f"--seeds: {a.seeds!r} is not a comma-separated list of integers")
    only = a.knobs.split(",") if a.knobs else list(KNOBS)
    unknown = [k for k in only if k not in KNOBS]
    if unknown:
        sys.exit(f"--knobs: unknown {', '.join(unknown)}; one of {', '.join(KNOBS)}")
    with open(MODEL_RS, encoding="utf-8") as f:
        text = f.read()
    values = {}
    for k, pattern in ((k, KNOBS[k]) for k in only):
        m = re.search(pattern, text)
        if not m:
            sys.exit(f"{MODEL_RS}: no value for {k} ({pattern})")
        values[k] = float(m.group(1).replace("_", ""))
    bases = {seed: compare(a.binary, [], seed) for seed in seeds}
    base = bases[seeds[0]]
    out = {"values": values, "seeds": seeds, "base": base, "bases": bases, "moves": {}}
    what = "mean over seeds " + a.seeds + " ± standard deviation, " if len(seeds) > 1 else ""
    print("Points each modelled efficiency moves with a knob at ×0.5 / ×1.5 "
          f"({what}2.5 h | 4.2 h; the largest over the limited policies, then LRU 10 and "
          "two-phase 100K → 10):\n")
    print("| knob | value | ×0.5: largest | LRU 10 | → 10 | ×1.5: largest | LRU 10 | → 10 |")
    print("|---|---|---|---|---|---|---|---|")

    def stats(xs):
        m = sum(xs) / len(xs)
        sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
        return m, sd

    def fmt(m):
        # m: ((mean, sd) at 2.5 h, (mean, sd) at 4.2 h)
        if len(seeds) == 1:
            return f"{m[0][0]:+.1f} \\| {m[1][0]:+.1f}"
        return f"{m[0][0]:+.1f} ± {m[0][1]:.1f} \\| {m[1][0]:+.1f} ± {m[1][1]:.1f}"

    for k, v in values.items():
        cells = []
        for factor in FACTORS:
            x = v * factor
            if k in CHANCES:
                x = min(x, 1.0)
            per_seed = {}
            for seed in seeds:
                run = compare(a.binary, [(k, x)], seed)
                b = bases[seed]
                per_seed[seed] = {p: (100 * (run[p][0] - b[p][0]), 100 * (run[p][1] - b[p][1]))
                                  for p in b if p != "unlimited"}
            policies = list(per_seed[seeds[0]])
            moves = {p: (stats([per_seed[s][p][0] for s in seeds]),
                         stats([per_seed[s][p][1] for s in seeds]))
                     for p in policies}
            out["moves"][f"{k}x{factor}"] = {"value": x, "per_seed": per_seed,
                                             "moves": {p: (m[0][0], m[1][0])
                                                       for p, m in moves.items()}}
            big = max(moves.values(), key=lambda m: max(abs(m[0][0]), abs(m[1][0])))
            cells += [fmt(big), fmt(moves["lru-10"]), fmt(moves["two-phase-100000-10"])]
        print(f"| `{k}` | {v:g} | " + " | ".join(cells) + " |", flush=True)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
