#!/usr/bin/env python3
"""Launch the peers' kernels of bench/peers.py cases plainly (no CUDA graph, no timing), for Nsight
Compute: it profiles each launch as its own workload, so normkit's and a peer's kernels for the same
case can be compared counter by counter (duration, instructions, stall reasons), e.g.

  ncu --section SpeedOfLight --section WarpStateStats -k 'regex:forward' \\
      python3 bench/peer_kernels.py --cases tile8_small --peers liger,normkit --ops fwd

Each (case, peer, op) runs --calls times on --sets rotating inputs, after one untimed call (the
Triton peers compile on their first call: ncu's --launch-skip or the kernel filter leaves those out).
Peers that do not import are listed and skipped, as in peers.py.
"""
import argparse
import sys

import torch

import peers


def peer_table(family, n, liger_path, wanted):
    """name -> (prepare or None, op name -> fn(set)) for the wanted peers that are available."""
    table, notes = {}, []
    fwd, _gb, full = peers.eager_ops(family, n)
    if "eager" in wanted:
        table["eager"] = (None, {"fwd": fwd, "full": full})
    if "compile" in wanted:
        cfwd, cfull = peers.compiled_ops(family, n)
        table["compile"] = (None, {"fwd": cfwd, "full": cfull})
    if "normkit" in wanted:
        try:
            import normkit  # noqa: F401
            nfwd, _ngb, nfull = peers.normkit_ops(family, n)
            table["normkit"] = (None, {"fwd": nfwd, "full": nfull})
        except Exception as e:  # noqa: BLE001
            notes.append(f"normkit: {type(e).__name__}: {e}")
    optional, optional_notes = peers.optional_peers(family, n, liger_path)
    notes += optional_notes
    for name, (prepare, pfwd, pfull) in optional.items():
        if name in wanted:
            table[name] = (prepare, {"fwd": pfwd, "full": pfull})
    return table, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="case names of bench/peers.py (comma list)")
    ap.add_argument("--peers", default="eager,liger,normkit", help="comma list of eager, compile, liger, apex, quack, normkit")
    ap.add_argument("--ops", default="fwd", help="comma list of fwd, full")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--sets", type=int, default=3, help="input sets the calls rotate over")
    ap.add_argument("--liger-path", default=None)
    ap.add_argument("--describe", action="store_true",
                    help="print each case's 'M N dtype family' (normkit-bench spelling: f16, ln) and exit")
    args = ap.parse_args()
    cases = {c["name"]: c for c in peers.build_cases(["seed", "llm"])}
    names = args.cases.split(",")
    unknown = [n for n in names if n not in cases]
    if unknown:
        print(f"peer_kernels.py: unknown case(s) {unknown}; known: {sorted(cases)}", file=sys.stderr)
        return 2
    if args.describe:
        short = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
        for name in names:
            c = cases[name]
            print(c["M"], c["N"], short[c["dtype"]], c["family"])
        return 0
    if not torch.cuda.is_available():
        print("peer_kernels.py: no CUDA device", file=sys.stderr)
        return 2
    wanted = set(args.peers.split(","))
    for name in names:
        case = cases[name]
        sets = peers.make_sets(case, args.sets)
        table, notes = peer_table(case["family"], case["N"], args.liger_path, wanted)
        for note in notes:
            print(f"[peer_kernels] {name}: {note}", file=sys.stderr)
        for peer, (prepare, ops) in table.items():
            if prepare is not None and "full" in args.ops.split(","):  # the retained graphs full differentiates
                for s in sets:
                    prepare(s, case["family"])
            for op in args.ops.split(","):
                fn = ops[op]
                fn(sets[0])  # first call: Triton compiles, caches warm up
                torch.cuda.synchronize()
                for i in range(args.calls):
                    fn(sets[i % len(sets)])
                torch.cuda.synchronize()
                print(f"[peer_kernels] {name} {peer} {op}: {args.calls} calls", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
