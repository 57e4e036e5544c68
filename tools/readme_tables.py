#!/usr/bin/env python3
"""Regenerates the `pliant demo` tables of the ParSplice guide (docs/parsplice.md) from the program.

The tables under "The demo's tables" and "How do I replay a real trace instead of the model?" in
docs/parsplice.md are results, so they must come from the program and never be copied by hand.
(They were the README's until issue 31 moved them into the guide; the script kept its name, which
docs/benchmarks.md and the commit history use.) This script builds the release binary, runs
`pliant demo --json` for every run the guide shows, and prints each run's table as markdown under
the line the guide puts above it. `--check` compares them cell by cell with the tables in
docs/parsplice.md, so anyone can see that its numbers reproduce.

Two more tables come from `pliant demo --only auto --no-front --auto-efficiency E` (`auto` and
the unlimited cache it is measured against, nothing else: its row is the same as in the full run):
`goals` ("`auto`'s goals, measured": `auto` at its default 0.96 on every run above, with when it
armed and its window at the end) and `objectives` (how `auto` moves with its one number: E = 0.90,
0.96 and 0.99 on the model's default run and both replays). Twelve short runs for both, about
two and a half minutes on a 2-core machine.

Run from anywhere (it works in the repository root); Python 3 standard library only:
    python3 tools/readme_tables.py                     # print every table
    python3 tools/readme_tables.py --only g1m-4.2h     # one run
    python3 tools/readme_tables.py --only objectives   # the objective table alone
    python3 tools/readme_tables.py --check             # exit 1, with a diff, if the guide differs
    python3 tools/readme_tables.py --binary PATH       # run this build instead of building one

The replays need ../shared/traces/parsplice; without it they are skipped (with a message),
unless CI=true, when that is an error.
"""

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The page whose tables these are, relative to ROOT.
DOC = "docs/parsplice.md"
TRACES = "../shared/traces/parsplice"
BUILD_TIMEOUT = 1800  # a cold release build on a 2-core machine
RUN_TIMEOUT = 900

# name: (arguments of `pliant demo`, the guide's line above the table; a replay's line is
# built from the run, and this is how it starts)
RUNS = {
    "g100k-2.5h": ([], "Growth delay 100,000, 2.5 h (the default run):"),
    "g100k-4.2h": (["--hours", "4.2"], "Growth delay 100,000, 4.2 h:"),
    "g1m-2.5h": (["--growth", "1000000"], "Growth delay 1,000,000, 2.5 h:"),
    "g1m-4.2h": (["--growth", "1000000", "--hours", "4.2"], "Growth delay 1,000,000, 4.2 h:"),
    "d1M": (["--trace", f"{TRACES}/d1M/rank4.csv.gz"], "d1M rank4 ("),
    "d100K": (["--trace", f"{TRACES}/d100K/rank4.csv.gz"], "d100K rank4 ("),
}


# Tables made from several runs: name: the start of the guide's line above the table.
TABLES = {
    "goals": "Issue 10's goals for `auto` with nothing set by hand",
    "objectives": "How the results move with the one number `auto` is given",
}
# The goal table's row labels, in the guide's order (every run of RUNS).
GOAL_ROWS = {
    "g100k-2.5h": "model, growth 100,000, 2.5 h",
    "g100k-4.2h": "model, growth 100,000, 4.2 h",
    "g1m-2.5h": "model, growth 1,000,000, 2.5 h",
    "g1m-4.2h": "model, growth 1,000,000, 4.2 h",
    "d1M": "d1M rank4 replayed",
    "d100K": "d100K rank4 replayed",
}
# The objective table: its objectives (rows) and runs (columns, with their headings).
OBJECTIVES = (0.90, 0.96, 0.99)
OBJECTIVE_RUNS = {
    "g100k-2.5h": "model g100K 2.5 h",
    "d100K": "d100K replayed",
    "d1M": "d1M replayed",
}
DEFAULT_EFFICIENCY = 0.96  # pliant_tier::auto::EFFICIENCY


def replay(name):
    return "--trace" in RUNS[name][0]


def human(b):
    """Bytes as the demo prints them (`human` in crates/pliant/src/cmd/demo.rs)."""
    if b >= 1e9:
        return f"{b / 1e9:.2f} GB"
    if b >= 1e6:
        return f"{b / 1e6:.1f} MB"
    if b >= 1e3:
        return f"{b / 1e3:.1f} KB"
    return f"{b:.0f} B"


def pct(x):
    return f"{100 * x:.2f}%"


def columns(row):
    """(label, JSON field, format) of the columns this JSON has, in the guide's order."""
    final = "final % of unlimited" if "peak_fraction" in row else "memory % of unlimited"
    cols = [
        ("efficiency", "efficiency", lambda x: f"{100 * x:.1f}%"),
        ("replay time", "finished_s", lambda x: f"{x:,.0f} s"),
        ("final memory", "final_memory_bytes", human),
        ("peak memory", "peak_memory_bytes", human),
        ("mean memory", "mean_memory_bytes", human),
        (final, "memory_fraction", pct),
        ("peak % of unlimited", "peak_fraction", pct),
        ("mean % of unlimited", "mean_fraction", pct),
        ("peak store reads/s", "peak_store_reads_per_s", lambda x: f"{x:.0f}"),
    ]
    return [c for c in cols if c[1] in row]


def table(data):
    """The markdown lines of a run's table."""
    rows = data["policies"]
    cols = columns(rows[0])
    cells = [[r["policy"]] + [fmt(r[field]) for _, field, fmt in cols] for r in rows]
    if data.get("replay"):  # as the guide's replay tables do; its model tables do not merge
        cells = merge_two_phase(cells)
    lines = ["| policy | " + " | ".join(c[0] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for c in cells:
        if c[0] == "auto":
            c = [f"**{c[0]}**", f"**{c[1]}**"] + c[2:]
        lines.append("| " + " | ".join(c) + " |")
    return lines


def merge_two_phase(cells):
    """Consecutive two-phase rows with equal cells become one `two-phase-100000-10 … -10000`."""
    out = []
    for c in cells:
        prev = out[-1] if out else None
        if prev and prev[0].startswith("two-phase-") and c[0].startswith("two-phase-") \
                and prev[1:] == c[1:]:
            prev[0] = f"{prev[0].split(' … ')[0]} … -{c[0].rsplit('-', 1)[1]}"
        else:
            out.append(list(c))
    return out


def header(name, data):
    """The line the guide puts above the run's table."""
    rep = data.get("replay")
    if not rep:
        return RUNS[name][1]
    frm = " from ps-config.xml" if data["growth_delay_from"].endswith("ps-config.xml") else ""
    rank = os.path.basename(rep["path"]).split(".")[0]
    return (f"{name} {rank} (growth delay {data['growth_delay']:,.0f}{frm}; "
            f"{rep['reads']:,} reads, {rep['writes']:,} writes, {rep['keys']:,} keys "
            f"over {rep['span_seconds']:,.0f} s; {data['seconds']:.1f} s):")


def front_line(data):
    """The sentence under a table on `auto` against the fixed policies' front, if it was swept."""
    auto = next((r for r in data["policies"] if r["policy"] == "auto"), None)
    if not auto or not data.get("front_final"):
        return None

    def gap(g):
        if g is None:
            return "below every fixed policy's memory"
        if g > 0:
            return f"{100 * g:.1f} points below it"
        return f"on or above it ({-100 * g:+.1f} points)"

    return (f"`auto` against the front of the fixed policies: {gap(auto.get('below_front_final'))}"
            f" on final memory, {gap(auto.get('below_front_mean'))} on mean memory.")


def doc_tables():
    """{the paragraph above a table, joined into one line: the table's lines} of DOC."""
    with open(os.path.join(ROOT, DOC), encoding="utf-8") as f:
        lines = f.read().splitlines()
    tables, i = {}, 0
    while i < len(lines):
        if lines[i].startswith("|") and i >= 2 and not lines[i - 1].strip():
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            k = i - 1
            while k > 0 and lines[k - 1].strip():
                k -= 1
            tables[" ".join(lines[k:i - 1])] = lines[i:j]
            i = j
        else:
            i += 1
    return tables


def cells_of(lines):
    """A markdown table's cells, without `**` and the |---| line."""
    rows = [[c.strip().replace("**", "") for c in l.strip().strip("|").split("|")] for l in lines]
    return [r for r in rows if not all(set(c) <= set("-: ") for c in r)]


def numbers(text):
    return re.findall(r"\b\d[\d,]*(?:\.\d+)?", text)


def check(name, head, lines, readme):
    """Prints whether DOC has this table under this header; True when it does."""
    prefix = RUNS[name][1]
    found = [(h, t) for h, t in readme.items() if h.startswith(prefix)]
    if len(found) != 1:
        print(f"{name}: {len(found)} tables in {DOC} under a line starting {prefix!r}")
        return False
    old_head, old = found[0]
    ok = cells_of(old) == cells_of(lines)
    # A replay's header has counts, which must agree too, and last the run's wall time, which
    # varies.
    head_ok = not replay(name) or numbers(old_head)[:-1] == numbers(head)[:-1]
    if ok and head_ok:
        print(f"{name}: matches {DOC}")
        return True
    print(f"{name}: differs from {DOC}")
    print("\n".join(difflib.unified_diff(
        [old_head] + old, [head] + lines, DOC, "generated", lineterm="", n=1)))
    return False


def auto_row(data):
    return next(r for r in data["policies"] if r["policy"] == "auto")


def efficiency_cell(e, objective):
    """`auto`'s efficiency; with two decimals too where one rounds it up onto its objective."""
    cell = f"{100 * e:.1f}%"
    if round(100 * e, 1) >= round(100 * objective, 1) > 100 * e:
        cell += f" ({100 * e:.2f}%)"
    return cell


def goals_table(results):
    """The lines of the table of `auto`'s goals: its row of every run."""
    lines = ["| run | efficiency | final | peak | mean | armed at | window at the end |",
             "|---|---|---|---|---|---|---|"]
    for name, label in GOAL_ROWS.items():
        a = auto_row(results[name])
        armed = f"{a['auto_armed_s']:,.0f} s" if a.get("auto_armed_s") is not None else "never"
        window = f"{a['auto_window_s']:,.0f} s" if a.get("auto_window_s") is not None else "-"
        lines.append(f"| {label} | {efficiency_cell(a['efficiency'], DEFAULT_EFFICIENCY)} | "
                     f"{pct(a['memory_fraction'])} | {pct(a['peak_fraction'])} | "
                     f"{pct(a['mean_fraction'])} | {armed} | {window} |")
    return lines


def objectives_table(results):
    """The lines of the objective table; `results[(name, objective)]` is an `--only auto` run."""
    lines = ["| objective | " + " | ".join(OBJECTIVE_RUNS.values()) + " |",
             "|---" * (len(OBJECTIVE_RUNS) + 1) + "|"]
    for i, objective in enumerate(OBJECTIVES):
        cells = []
        for j, name in enumerate(OBJECTIVE_RUNS):
            a = auto_row(results[(name, objective)])
            # The table's first cell says what its numbers are; the others are read by it.
            final, mean = ("% final", "% mean") if i == j == 0 else ("%", "%")
            cells.append(f"{100 * a['efficiency']:.1f}% at {100 * a['memory_fraction']:.2f}{final}, "
                         f"{100 * a['mean_fraction']:.2f}{mean} (W {a['auto_window_s']:,.0f} s)")
        lines.append(f"| {100 * objective:.0f}% | " + " | ".join(cells) + " |")
    return lines


def check_table(name, lines, readme):
    """Prints whether DOC has this many-run table; True when it does."""
    found = [(h, t) for h, t in readme.items() if h.startswith(TABLES[name])]
    if len(found) != 1:
        print(f"{name}: {len(found)} tables in {DOC} under a line starting {TABLES[name]!r}")
        return False
    if cells_of(found[0][1]) == cells_of(lines):
        print(f"{name}: matches {DOC}")
        return True
    print(f"{name}: differs from {DOC}")
    print("\n".join(difflib.unified_diff(found[0][1], lines, DOC, "generated",
                                         lineterm="", n=1)))
    return False


BINARY = None  # --binary, else the release build of this checkout


def run(name, objective=None):
    """Runs `pliant demo --json` for `name` and returns its JSON; with an objective, `auto`
    alone (and the unlimited cache it is measured against) at that efficiency objective."""
    binary = BINARY or os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR", "target"),
                                    "release", "pliant")
    extra = [] if objective is None else \
        ["--only", "auto", "--no-front", "--auto-efficiency", f"{objective:.2f}"]
    with tempfile.TemporaryDirectory() as report:
        cmd = [binary, "demo", *RUNS[name][0], *extra, "--json", "--report", report]
        print(f"{name}: {' '.join(cmd[1:-2])} …", file=sys.stderr, flush=True)
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            sys.exit(f"{name}: pliant demo took more than {RUN_TIMEOUT} s")
    if p.returncode != 0:
        sys.exit(f"{name}: pliant demo failed ({p.returncode}):\n{p.stderr}")
    data = json.loads(p.stdout)
    print(f"{name}: {data['seconds']:.1f} s wall time", file=sys.stderr)
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=[*RUNS, *TABLES], metavar="NAME",
                    help="make only NAME, one of: " + ", ".join([*RUNS, *TABLES]))
    ap.add_argument("--binary", metavar="PATH",
                    help="the pliant binary to run (default: build this checkout's release)")
    ap.add_argument("--json-dir", metavar="DIR",
                    help="also keep each run's JSON as DIR/NAME.json")
    ap.add_argument("--check", action="store_true",
                    help=f"compare each table with {DOC}'s under the same header line; "
                    "exit 1 and print a diff when they differ")
    a = ap.parse_args()

    global BINARY
    BINARY = a.binary
    wanted = [a.only] if a.only else [*RUNS, *TABLES]
    have_traces = os.path.isdir(os.path.join(ROOT, TRACES))
    if not have_traces and (any(n in RUNS and replay(n) for n in wanted)
                            or any(n in TABLES for n in wanted)):
        msg = f"{os.path.normpath(os.path.join(ROOT, TRACES))} is missing"
        if os.environ.get("CI") == "true":
            sys.exit(f"{msg}: the replays cannot run (CI=true)")
        print(f"{msg}: skipping the replays and the tables made from them", file=sys.stderr)
        wanted = [n for n in wanted if n in RUNS and not replay(n)]
    if not wanted:
        return 0
    if not BINARY:
        try:
            subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True,
                           stdout=sys.stderr, timeout=BUILD_TIMEOUT)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            sys.exit(f"cargo build --release failed: {e}")

    readme = doc_tables() if a.check else None
    ok = True
    results = {}

    def result(key):
        if key not in results:
            name, objective = key if isinstance(key, tuple) else (key, None)
            results[key] = run(name, objective)
            if a.json_dir:
                os.makedirs(a.json_dir, exist_ok=True)
                suffix = "" if objective is None else f"-auto-{objective:.2f}"
                with open(os.path.join(a.json_dir, f"{name}{suffix}.json"), "w",
                          encoding="utf-8") as f:
                    json.dump(results[key], f)
        return results[key]

    for name in wanted:
        if name in TABLES:
            if name == "goals":
                lines = goals_table({n: result((n, DEFAULT_EFFICIENCY)) for n in GOAL_ROWS})
            else:
                lines = objectives_table({(n, o): result((n, o))
                                          for o in OBJECTIVES for n in OBJECTIVE_RUNS})
            if a.check:
                ok &= check_table(name, lines, readme)
            else:
                print("\n".join([f"{TABLES[name]} …", ""] + lines + [""]), flush=True)
            continue
        data = result(name)
        head, lines = header(name, data), table(data)
        if a.check:
            ok &= check(name, head, lines, readme)
        else:
            front = front_line(data)
            extra = [textwrap.fill(front, 99), ""] if front else []
            print("\n".join([textwrap.fill(head, 99), ""] + lines + [""] + extra), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
