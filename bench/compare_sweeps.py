#!/usr/bin/env python3
"""Compare one strategy of a variant sweep against the best of a base sweep, cell by cell.

Both inputs are `normkit-bench --sweep --csv` files over the same (op, M, N) grid, typically the
same build run twice: once with the built-in planner table (BASE) and once with a table that
changes what a forced strategy plans (VARIANT), e.g. the fused backward as one thread-block
cluster on every cell:

    printf 'fused_cluster_max_elements = 16777216\\nfused_cluster_max_cols = 8192\\n' > t.table
    normkit-bench --sweep ... --csv base.csv
    NORMKIT_PLANNER_TABLE=t.table normkit-bench --sweep ... --csv variant.csv
    python3 bench/compare_sweeps.py base.csv variant.csv --strategy fused --label cluster

For each op it prints a markdown grid (rows M, columns N) of
    variant time / best base time, the best base strategy's initial, and the variant time in us,
where "best base" is the fastest of the base sweep's forced strategies other than --strategy,
plus --strategy itself where its base plan differs from the variant's (it was not the variant
there). Ratios below 1 mean the variant wins.
"""
import argparse
import collections
import csv
import sys


def load(path):
    cells = collections.defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["ok"] != "true" or row["strategy"] == "auto":
                continue
            cells[(row["op"], row["dtype"], int(row["M"]), int(row["N"]))][row["strategy"]] = (
                float(row["time_us"]), row["plan"])
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("variant")
    parser.add_argument("--strategy", default="fused", help="the strategy whose variant plan is compared")
    parser.add_argument("--label", default="variant", help="name of the variant in the headings")
    args = parser.parse_args()
    base, variant = load(args.base), load(args.variant)
    keys = sorted(set(base) & set(variant))
    if not keys:
        sys.exit("compare_sweeps: the two sweeps share no (op, dtype, M, N) cell")
    for op, dtype in sorted({(k[0], k[1]) for k in keys}):
        ms = sorted({k[2] for k in keys if k[:2] == (op, dtype)})
        ns = sorted({k[3] for k in keys if k[:2] == (op, dtype)})
        print(f"\n### {op} {dtype}: {args.label} / best base (best base strategy) {args.label} µs\n")
        print("| M \\ N | " + " | ".join(str(n) for n in ns) + " |")
        print("|---|" + "---|" * len(ns))
        wins = total = 0
        for m in ms:
            cells = []
            for n in ns:
                key = (op, dtype, m, n)
                mine = variant.get(key, {}).get(args.strategy)
                others = {s: t for s, (t, plan) in base.get(key, {}).items()
                          if s != args.strategy or (mine is not None and plan != mine[1])}
                if mine is None or not others:
                    cells.append("-")
                    continue
                best = min(others, key=others.get)
                ratio = mine[0] / others[best]
                total += 1
                wins += ratio < 1
                cells.append(f"{ratio:.2f} ({best}) {mine[0]:.2f}")
            print(f"| {m} | " + " | ".join(cells) + " |")
        print(f"\n{args.label} faster in {wins} of {total} cells.")


if __name__ == "__main__":
    main()
