#!/usr/bin/env python3
"""Kernel times next to the GPU's clocks and power: whether a spread between repeats of the same
measurement follows the SM clock (`scripts/gpu-check.sh clocks`).

    python3 bench/clock_spread.py --windows runs.txt --samples clocks.csv [--md out.md]

runs.txt: one line a normkit-bench invocation, "<json path> <start unix s> <end unix s>". clocks.csv:
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,<reasons> --format=csv,
noheader,nounits sampled every few tens of ms while the invocations ran (its timestamps are local time, like
the windows'). For each record: the time, and the SM clock, power and temperature sampled inside the record's
own window (normkit-bench's wall_start_ms / wall_end_ms: its warm-up and timed calls; else the invocation's),
mean and lowest clock, with the clock-event reasons seen there. Then,
per case, the repeats' spread and how much of it the clock would explain if the time scaled with 1 / clock.
"""
import argparse
import datetime
import json
import sys


def parse_samples(path):
    """[(unix seconds, sm MHz, mem MHz, watts, celsius, reasons)] of the lines that parse."""
    out = []
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.split(",")]
            if len(cells) < 6:
                continue
            try:
                stamp = datetime.datetime.strptime(cells[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((stamp, float(cells[1]), float(cells[2]), float(cells[3]), float(cells[4]), cells[5]))
            except ValueError:
                continue  # a header or "[N/A]"
    return out


def window_stats(samples, start, end):
    inside = [s for s in samples if start <= s[0] <= end]
    if not inside:
        return None
    n = len(inside)
    return {"samples": n, "sm_mean": sum(s[1] for s in inside) / n, "sm_min": min(s[1] for s in inside),
            "mem_mean": sum(s[2] for s in inside) / n, "watts": sum(s[3] for s in inside) / n,
            "celsius": max(s[4] for s in inside), "reasons": sorted({s[5] for s in inside})}


def report(windows, samples):
    lines = ["| invocation | case | op | dtype | strategy | time (us) | SM MHz mean / min | mem MHz | W | C | clock-event reasons |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    per_case = {}
    for i, (path, start, end) in enumerate(windows, 1):
        with open(path) as f:
            records = [r for r in json.load(f)["records"] if r.get("ok")]
        for r in records:
            k = (r["case"], r["op"], r["dtype"], r.get("strategy", ""))
            if r.get("wall_start_ms") is not None and r.get("wall_end_ms") is not None:
                stats = window_stats(samples, r["wall_start_ms"] / 1e3, r["wall_end_ms"] / 1e3)
            else:
                stats = window_stats(samples, start, end)
            if stats is None:
                lines.append(f"| {i} | {k[0]} | {k[1]} | {k[2]} | {k[3]} | {r['time_us']:.2f} | no samples | | | | |")
                continue
            per_case.setdefault(k, []).append((r["time_us"], stats["sm_mean"]))
            lines.append(f"| {i} | {k[0]} | {k[1]} | {k[2]} | {k[3]} | {r['time_us']:.2f} | {stats['sm_mean']:.0f} / "
                         f"{stats['sm_min']:.0f} | {stats['mem_mean']:.0f} | {stats['watts']:.0f} | "
                         f"{stats['celsius']:.0f} | {' '.join(stats['reasons'])} |")
    lines += ["", "| case | op | dtype | strategy | repeats | slowest / fastest | clock of the fastest / of the slowest |",
              "|---|---|---|---|---|---|---|"]
    for k, runs in sorted(per_case.items()):
        fastest, slowest = min(runs), max(runs)
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {len(runs)} | {slowest[0] / fastest[0]:.3f} | "
                     f"{fastest[1] / slowest[1]:.3f} |")
    lines += ["", "A time that follows the SM clock has slowest / fastest close to the clock ratio beside it; "
              "a ratio near 1.000 there means the spread is not the clock."]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", required=True)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--md")
    args = ap.parse_args()
    windows = []
    with open(args.windows) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                windows.append((parts[0], float(parts[1]), float(parts[2])))
    samples = parse_samples(args.samples)
    if not samples:
        print(f"clock_spread: no samples parsed from {args.samples}", file=sys.stderr)
        return 1
    text = "\n".join(report(windows, samples)) + "\n"
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
