#!/usr/bin/env python3
"""Per-kernel device time of the decode steps of one `rbee bench` run profiled by Nsight Compute.

Reads the CSV that `ncu --csv --metrics gpu__time_duration.sum` prints (one row per profiled kernel, graph nodes
included with --graph-profiling node) and prints, for the kernels whose first grid dimension and name repeat in the
last STEPS decode steps, a table: kernel, grid, block, calls per step, us per call, us per step, share of the step.
A decode step is found as the launches between two launches of the step's marker kernel (--marker: a substring of
the name of a kernel that runs once per step, e.g. the argmax); the last --steps steps are averaged.

Usage: ncu_kernel_table.py NCU.csv [--marker ExtremeOp] [--steps 2] [--bytes-per-step B] [--copy-gbs G]
The sum of the kernels' times is what the step would take with no gap between kernels; the step's measured time
beside it (from the bench) gives the launch and dependency gaps.
"""
import argparse
import collections
import csv
import io
import sys


def read_rows(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    # ncu prints its own lines (==PROF== ...) before the CSV header.
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV header found")
    rows = []
    for r in csv.DictReader(io.StringIO(text[start:])):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        us = value / 1000.0 if unit in ("nsecond", "ns") else value * 1e-3 if unit == "ps" else value
        if unit in ("usecond", "us"):
            us = value
        if unit in ("msecond", "ms"):
            us = value * 1000.0
        rows.append((int(r["ID"]), r["Kernel Name"], r.get("Grid Size", ""), r.get("Block Size", ""), us))
    rows.sort()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--marker", default="ExtremeOp", help="substring of a kernel that runs once per decode step")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    rows = read_rows(a.csv)
    marks = [i for i, r in enumerate(rows) if a.marker in r[1]]
    if len(marks) >= a.steps + 1:
        first, last = marks[-a.steps - 1] + 1, marks[-1] + 1
    else:  # no marker: every kernel profiled, as one "step" (the calls column then counts the whole run)
        print(f"({len(marks)} launches of a kernel named like '{a.marker}': the table covers every kernel)")
        first, last, a.steps = 0, len(rows), 1
    step = rows[first:last]
    total = sum(r[4] for r in step) / a.steps
    groups = collections.OrderedDict()
    for _, name, grid, block, us in step:
        short = name.split("(")[0][:90]
        key = (short, grid, block)
        g = groups.setdefault(key, [0, 0.0])
        g[0] += 1
        g[1] += us
    print(f"{len(rows)} kernels profiled; the last {a.steps} decode steps (between launches of '{a.marker}'): "
          f"{len(step) / a.steps:.0f} kernels a step, {total:.1f} us of kernel time a step (no gaps)")
    print("| kernel | grid | block | calls a step | us a call | us a step | share |")
    print("|---|---|---|---|---|---|---|")
    ordered = sorted(groups.items(), key=lambda kv: -kv[1][1])
    for (name, grid, block), (n, us) in ordered[: a.top]:
        print(f"| {name} | {grid} | {block} | {n / a.steps:.0f} | {us / n:.2f} | {us / a.steps:.1f} | "
              f"{us / a.steps / total:.3f} |")
    rest = ordered[a.top:]
    if rest:
        print(f"| ({len(rest)} more) | | | | | {sum(v[1] for _, v in rest) / a.steps:.1f} | |")


if __name__ == "__main__":
    main()
