#!/usr/bin/env python3
"""The issue's performance targets (issue 5, "Beat the field") counted from a bench/peers.py JSON: each target
met or missed, with its number, case by case. No torch needed: it reads the JSON only.

  python3 bench/scorecard.py bench/results/h100-peers-38f21c6.json [--md scorecard.md]

Several JSONs (the parts of a run split over calls, before or instead of `peers.py --merge`) are read as one
run; they must share commit and GPU. The targets are stated for the H200: on another GPU the scorecard says so.

Targets (CUDA-graph kernel time; "large" = at least 8 MB of traffic for that op, floor bytes; a peer is
eager, torch.compile, Liger, Apex or Quack, whichever the run measured):
  full_floor   full backward >= 90 % of its floor, large cases
  full_peer    full backward <= 0.85x the best peer's time, large cases (also counted over every case)
  small        full backward <= 2.5 us: tile8_small, tile64_medium, tile128_medium, tile256_bert
  gb_floor     dgamma/dbeta only >= 85 % of its floor, large cases
  gb_eager     dgamma/dbeta only never slower than PyTorch eager, seed cases (also counted over every case)
  fwd_floor    forward >= 90 % of its floor, large cases
  fwd_peer     forward not slower than the best peer, every case
A case without normkit's time or any peer's for a target is listed as not measured, never as met.
(The issue's sixth target, auto within 3 % of the best forced strategy, comes from normkit-bench's sweep.)
"""
import argparse
import json
import sys

LARGE_BYTES = 8e6
SMALL_CASES = ("tile8_small", "tile64_medium", "tile128_medium", "tile256_bert")
PEERS = ("eager", "compile", "liger", "apex", "quack")
PEER_NAMES = {"eager": "eager", "compile": "torch.compile", "liger": "Liger", "apex": "Apex", "quack": "Quack"}


def read_runs(paths):
    """The JSONs of one peers.py run, or of its parts: (metas, results by case name, file index by case name).
    A case in two files is kept from the later one (a part re-run replaces its case), the rule of
    `peers.py --merge`, whose loop this repeats: peers.py imports torch at load and is loaded from outside bench/ by
    the tests, so neither file imports the other."""
    metas, results, source = [], {}, {}
    for i, path in enumerate(paths):
        with open(path) as f:
            data = json.load(f)
        metas.append(data["meta"])
        for r in data["results"]:
            results.pop(r["name"], None)  # re-inserted: a replaced case takes the later file's place
            results[r["name"]], source[r["name"]] = r, i
    return metas, results, source


def load(paths):
    """(meta, results) of one run from one or more JSONs of it (read_runs)."""
    metas, results, _source = read_runs(paths)
    for key in ("commit", "gpu"):
        values = {m.get(key) for m in metas}
        if len(values) > 1:
            raise SystemExit(f"scorecard.py: the JSONs differ in {key}: {sorted(map(str, values))}")
    return metas[0], list(results.values())


def best_peer(times, op, peers=PEERS):
    """(name, time) of the fastest of `peers` measured for op, or (None, None)."""
    measured = [(times[f"{p}_{op}"], p) for p in peers if times.get(f"{p}_{op}")]
    if not measured:
        return None, None
    t, p = min(measured)
    return p, t


class Target:
    def __init__(self, key, text):
        self.key, self.text = key, text
        self.met, self.missed, self.unmeasured = [], [], []

    def add(self, case, ok, detail):
        (self.met if ok else self.missed).append((case, detail))

    def line(self):
        n = len(self.met) + len(self.missed)
        s = f"- **{self.key}** ({self.text}): met {len(self.met)} / {n}"
        if self.unmeasured:
            s += f"; not measured: {', '.join(self.unmeasured)}"
        if self.missed:
            s += "\n  - missed: " + "; ".join(f"{c} {d}" for c, d in self.missed)
        return s


def score(meta, results):
    """Targets (in the docstring's order) and one row of figures a case."""
    bytes_per_us = meta["copy_bandwidth_GBps"] * 1e3  # GB/s -> bytes per microsecond
    targets = {k: Target(k, t) for k, t in (
        ("full_floor", "full backward >= 90 % of the floor, cases of >= 8 MB"),
        ("full_peer", "full backward <= 0.85x the best peer, cases of >= 8 MB"),
        ("full_peer_all", "the same over every case"),
        ("small", "full backward <= 2.5 us, the four small seed cases"),
        ("gb_floor", "dgamma/dbeta only >= 85 % of the floor, cases of >= 8 MB"),
        ("gb_eager", "dgamma/dbeta only not slower than eager, seed cases"),
        ("gb_eager_all", "the same over every case"),
        ("fwd_floor", "forward >= 90 % of the floor, cases of >= 8 MB"),
        ("fwd_peer", "forward not slower than the best peer, every case"),
    )}
    rows = []
    for r in results:
        name = r["name"]
        t, floor = r["times"], r["floor_us"]
        large = {op: floor[op] * bytes_per_us >= LARGE_BYTES for op in ("fwd", "gb", "full")}
        row = {"case": name, "M": r["M"], "N": r["N"], "dtype": r["dtype"]}

        def vs_peer(op, limit, keys, peers=PEERS):
            nk = t.get(f"normkit_{op}")
            peer, best = best_peer(t, op, peers)
            for key in keys:
                if not nk or best is None:
                    targets[key].unmeasured.append(name)
                else:
                    # 3 decimals where the limit is parity: 1.004x must not read as 1.00x
                    ratio = f"{nk / best:.3f}x" if limit == 1.0 else f"{nk / best:.2f}x"
                    targets[key].add(name, nk <= limit * best, f"{ratio} {PEER_NAMES[peer]}")
            return None if not nk or best is None else (nk / best, PEER_NAMES[peer])

        def floor_target(op, key, share):
            nk = t.get(f"normkit_{op}")
            p = None if not nk else 100.0 * floor[op] / nk
            if not large[op]:
                return p
            if p is None:
                targets[key].unmeasured.append(name)
            else:
                targets[key].add(name, p >= share, f"{p:.1f} %")
            return p

        row["full_pct"] = floor_target("full", "full_floor", 90.0)
        row["full_peer"] = vs_peer("full", 0.85, ["full_peer", "full_peer_all"] if large["full"] else ["full_peer_all"])
        if r["name"] in SMALL_CASES:
            nk = t.get("normkit_full")
            if nk is None:
                targets["small"].unmeasured.append(name)
            else:
                targets["small"].add(name, nk <= 2.5, f"{nk:.2f} us")
        row["full_us"] = t.get("normkit_full")
        row["gb_pct"] = floor_target("gb", "gb_floor", 85.0)
        gb_keys = ["gb_eager", "gb_eager_all"] if r.get("suite") == "seed" else ["gb_eager_all"]
        gb_eager = vs_peer("gb", 1.0, gb_keys, peers=("eager",))
        row["gb_eager"] = None if gb_eager is None else gb_eager[0]
        row["fwd_pct"] = floor_target("fwd", "fwd_floor", 90.0)
        row["fwd_peer"] = vs_peer("fwd", 1.0, ["fwd_peer"])
        rows.append(row)
    return list(targets.values()), rows


def render(meta, targets, rows, sources):
    f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
    gpu = meta.get("gpu", "?")
    out = [f"# Issue 5 scorecard: {meta.get('commit', '?')} on {gpu}", "",
           f"- from: {', '.join(sources)} (bench/peers.py, {meta.get('date', '?')}); counted by bench/scorecard.py",
           f"- torch.compile measured: {'yes' if meta.get('compile') else 'no'}; copy bandwidth "
           f"{meta['copy_bandwidth_GBps'] / 1000:.3f} TB/s; large = at least {LARGE_BYTES / 1e6:g} MB of the op's traffic"]
    if "H200" not in gpu:
        out.append(f"- **not the H200**: the issue states its targets for the H200; these are {gpu}'s figures")
    if not meta.get("outputs_kept"):
        out.append("- **outputs reused**: a run before bench/peers.py's RecentOutputs (fc18a7a), whose graphs wrote every "
                   "call's output to one address: where an output fits in L2, forward (and less so full backward) "
                   "figures read high, for every peer alike (docs/NOTES.md entry 100)")
    out += ["", "## Targets", ""] + [t.line() for t in targets]
    out += ["", "## Case by case", "",
            "| case | M | N | dtype | full % floor | full / best peer | full µs | gb % floor | gb / eager "
            "| fwd % floor | fwd / best peer |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peer = lambda v: "-" if v is None else f"{v[0]:.2f}x {v[1]}"  # noqa: E731
        out.append(f"| {r['case']} | {r['M']} | {r['N']} | {r['dtype']} | {f(r['full_pct'], '{:.1f}')} | "
                   f"{peer(r['full_peer'])} | {f(r['full_us'], '{:.2f}')} | {f(r['gb_pct'], '{:.1f}')} | "
                   f"{f(r['gb_eager'], '{:.2f}x')} | {f(r['fwd_pct'], '{:.1f}')} | {peer(r['fwd_peer'])} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="bench/peers.py JSON(s) of one run")
    ap.add_argument("--md", default=None, help="also write the scorecard here")
    args = ap.parse_args(argv)
    meta, results = load(args.json)
    targets, rows = score(meta, results)
    text = render(meta, targets, rows, args.json)
    sys.stdout.write(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
