#!/usr/bin/env python3
"""A/B of two builds from normkit-bench JSON runs: the same cases timed by build A (base) and build B
(new), alternating A, B, A, B, ... in one device call (`scripts/gpu-check.sh ab`).

    python3 bench/compare_ab.py --a a1.json a2.json --b b1.json b2.json [--labels base new] [--md out.md]

Records are matched by (case, op, dtype, strategy, mode). For each case it prints every run's time
of both builds, B / A of the means, and whether the two builds' ranges overlap -- a ratio whose
ranges overlap is within the run-to-run spread of this call, not a difference. Records that failed
(ok = false) or exist in only one build are listed, never dropped silently.
"""
import argparse
import json
import sys


def key(record):
    return (record["case"], record["op"], record["dtype"], record["strategy"], record["mode"])


def load(paths):
    """Per key: the list of times over the runs (one per file), and the plan of the first run."""
    times, plans, failed = {}, {}, set()
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["records"]:
                k = key(r)
                if not r.get("ok"):
                    failed.add(k)
                    continue
                times.setdefault(k, []).append(float(r["time_us"]))
                plans.setdefault(k, r.get("plan", ""))
    return times, plans, failed


def compare(a_paths, b_paths, labels=("A", "B")):
    """The markdown report, a list of lines."""
    a, a_plans, a_failed = load(a_paths)
    b, b_plans, b_failed = load(b_paths)
    la, lb = labels
    lines = [f"| case | op | dtype | strategy | {la} runs (us) | {lb} runs (us) | {lb} / {la} | spread |",
             "|---|---|---|---|---|---|---|---|"]
    for k in sorted(set(a) & set(b), key=lambda k: (k[1], k[0], k[2], k[3], k[4])):
        ta, tb = a[k], b[k]
        ratio = (sum(tb) / len(tb)) / (sum(ta) / len(ta))
        overlap = min(ta) <= max(tb) and min(tb) <= max(ta)
        spread = "ranges overlap" if overlap else ("faster" if ratio < 1 else "slower")
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {' / '.join(f'{t:.2f}' for t in ta)} | "
                     f"{' / '.join(f'{t:.2f}' for t in tb)} | {ratio:.3f} | {spread} |")
    plan_changes = [k for k in sorted(set(a_plans) & set(b_plans)) if a_plans[k] != b_plans[k]]
    if plan_changes:
        lines += ["", "Plans that differ between the builds:"]
        lines += [f"- {k[0]} {k[1]} {k[2]} {k[3]}: {la} `{a_plans[k]}`, {lb} `{b_plans[k]}`" for k in plan_changes]
    only = sorted((set(a) ^ set(b)) | a_failed | b_failed)
    if only:
        lines += ["", "Not compared (failed, or timed by one build only):"]
        lines += [f"- {' '.join(map(str, k))}: {la} {'failed' if k in a_failed else 'ok' if k in a else 'absent'}, "
                  f"{lb} {'failed' if k in b_failed else 'ok' if k in b else 'absent'}" for k in only]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", nargs="+", required=True, help="JSON runs of build A (base)")
    parser.add_argument("--b", nargs="+", required=True, help="JSON runs of build B (new)")
    parser.add_argument("--labels", nargs=2, default=["A", "B"])
    parser.add_argument("--md", help="also write the report here")
    args = parser.parse_args()
    lines = compare(args.a, args.b, tuple(args.labels))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
