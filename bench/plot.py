#!/usr/bin/env python3
"""Heatmaps of a normkit-bench --sweep JSON (one PNG per (op, dtype, mode)):

  (a) fastest forced strategy per (M, N)
  (b) auto time / best forced time (the seed's "chess board": uniform ~1.0 means the planner picks well)
  (c) auto's % of the byte floor

and prints the 10 worst auto/best ratios and the 10 worst % of floor.

    python3 bench/plot.py sweep.json [more.json ...] --out-dir plots [--mode graph]
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict

STRATEGIES = ["simple", "tiled", "two_pass", "fused"]


def load(paths):
    records, meta = [], None
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        meta = meta or doc.get("meta", {})
        records += doc.get("records", [])
    return meta, records


def group(records, mode):
    """(op, dtype, mode) -> {(M, N): {strategy: record}}"""
    out = defaultdict(lambda: defaultdict(dict))
    for r in records:
        if mode and r.get("mode") != mode:
            continue
        out[(r["op"], r["dtype"], r["mode"])][(r["M"], r["N"])][r["strategy"]] = r
    return out


def cell_stats(cell):
    forced = {s: cell[s]["time_us"] for s in STRATEGIES if s in cell and cell[s].get("ok")}
    auto = cell.get("auto")
    if not forced or not auto or not auto.get("ok"):
        return None
    best_s = min(forced, key=forced.get)
    return dict(best_strategy=best_s, best_us=forced[best_s], auto_us=auto["time_us"],
                ratio=auto["time_us"] / forced[best_s], pct_floor=auto.get("pct_floor"),
                auto_choice=auto.get("auto_choice") or auto.get("plan", "").split(" ")[0], forced=forced)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="normkit-bench --sweep --json output(s)")
    ap.add_argument("--out-dir", default="bench/results/plots")
    ap.add_argument("--mode", default=None, help="graph or events (default: every mode present)")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()

    meta, records = load(args.json)
    groups = group(records, args.mode)
    if not groups:
        print("plot.py: no sweep records found", file=sys.stderr)
        return 1

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import ListedColormap, LogNorm, BoundaryNorm
    except ImportError as e:
        plt = None
        print(f"plot.py: matplotlib not available ({e}): printing tables only", file=sys.stderr)
    if plt is not None:
        os.makedirs(args.out_dir, exist_ok=True)

    worst_ratio, worst_floor = [], []
    for (op, dtype, mode), cells in sorted(groups.items()):
        ms = sorted({mn[0] for mn in cells})
        ns = sorted({mn[1] for mn in cells})
        stats = {mn: cell_stats(c) for mn, c in cells.items()}
        for (m, n), s in stats.items():
            if s is None:
                continue
            tag = f"{op} {dtype} {mode} M={m} N={n}"
            worst_ratio.append((s["ratio"], tag, s))
            if s["pct_floor"] is not None:
                worst_floor.append((s["pct_floor"], tag, s))
        if plt is None:
            continue

        def grid(fn):
            g = [[float("nan")] * len(ns) for _ in ms]
            for i, m in enumerate(ms):
                for j, n in enumerate(ns):
                    s = stats.get((m, n))
                    if s is not None:
                        g[i][j] = fn(s)
            return g

        fig, axes = plt.subplots(1, 3, figsize=(21, 7))
        # a sweep under another planner table than the built-in one says which (normkit-bench's meta)
        table = meta.get("planner_table", "built-in")  # "built-in (GPU)" since the H100 SXM's own table
        table_note = "" if table.startswith("built-in") else f", planner table {os.path.basename(table)}"
        fig.suptitle(f"normkit {op} {dtype} ({mode} timing) — {meta.get('device', '')}, commit {meta.get('commit', '')}"
                     + table_note)
        # (a) fastest strategy
        cmap = ListedColormap(["#8c8c8c", "#1f77b4", "#ff7f0e", "#2ca02c"])
        norm = BoundaryNorm([-0.5, 0.5, 1.5, 2.5, 3.5], cmap.N)
        a = grid(lambda s: STRATEGIES.index(s["best_strategy"]))
        im = axes[0].imshow(a, origin="lower", aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
        cb = fig.colorbar(im, ax=axes[0], ticks=range(len(STRATEGIES)))
        cb.ax.set_yticklabels(STRATEGIES)
        axes[0].set_title("(a) fastest forced strategy")
        # (b) auto / best
        b = grid(lambda s: s["ratio"])
        im = axes[1].imshow(b, origin="lower", aspect="auto", cmap="RdYlGn_r", vmin=0.9, vmax=2.0,
                            interpolation="nearest")
        fig.colorbar(im, ax=axes[1])
        axes[1].set_title("(b) auto / best forced (1.0 = auto picks the best)")
        for i in range(len(ms)):
            for j in range(len(ns)):
                if not math.isnan(b[i][j]) and b[i][j] > 1.05:
                    axes[1].text(j, i, f"{b[i][j]:.2f}", ha="center", va="center", fontsize=6)
        # (c) % of floor
        c = grid(lambda s: s["pct_floor"] if s["pct_floor"] is not None else float("nan"))
        im = axes[2].imshow(c, origin="lower", aspect="auto", cmap="viridis", norm=LogNorm(vmin=0.1, vmax=100),
                            interpolation="nearest")
        fig.colorbar(im, ax=axes[2])
        axes[2].set_title("(c) auto: % of the byte floor")
        for ax in axes:
            ax.set_xticks(range(len(ns)))
            ax.set_xticklabels([str(n) for n in ns], rotation=90, fontsize=7)
            ax.set_yticks(range(len(ms)))
            ax.set_yticklabels([str(m) for m in ms], fontsize=7)
            ax.set_xlabel("N")
            ax.set_ylabel("M")
        fig.tight_layout()
        path = os.path.join(args.out_dir, f"sweep-{op}-{dtype}-{mode}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"plot.py: wrote {path}", file=sys.stderr)

    def show(title, rows, key_fmt):
        print(f"\n{title}\n")
        print("| rank | cell | value | auto µs | best forced | best µs | auto choice |")
        print("|---|---|---|---|---|---|---|")
        for k, (v, tag, s) in enumerate(rows[: args.top]):
            print(f"| {k + 1} | {tag} | {key_fmt(v)} | {s['auto_us']:.2f} | {s['best_strategy']} | "
                  f"{s['best_us']:.2f} | {s['auto_choice']} |")

    show(f"Worst {args.top} auto / best forced", sorted(worst_ratio, key=lambda t: -t[0]), lambda v: f"{v:.3f}")
    show(f"Worst {args.top} % of floor (auto)", sorted(worst_floor, key=lambda t: t[0]), lambda v: f"{v:.3g}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
