"""bench/compare_sweeps.py: the variant/base ratio grid it prints from two sweep CSVs (no torch needed)."""
import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIELDS = ["op", "dtype", "M", "N", "strategy", "ok", "time_us", "plan"]


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for op, m, n, strategy, t, plan in rows:
            w.writerow({"op": op, "dtype": "bf16", "M": m, "N": n, "strategy": strategy, "ok": "true",
                        "time_us": t, "plan": plan})


def test_ratio_against_the_best_other_strategy(tmp_path):
    base, variant = tmp_path / "base.csv", tmp_path / "variant.csv"
    write(base, [("ln_bwd", 32, 512, "tiled", 5.0, "tiled"), ("ln_bwd", 32, 512, "two_pass", 6.0, "two_pass"),
                 ("ln_bwd", 32, 512, "fused", 3.0, "fused blocks=2"),   # a different fused plan: it competes
                 ("ln_bwd", 64, 512, "tiled", 8.0, "tiled"),
                 ("ln_bwd", 64, 512, "fused", 1.0, "fused blocks=4 cluster"),  # the variant's own plan: ignored
                 ("ln_bwd", 64, 512, "auto", 0.5, "tiled")])              # auto is never a competitor
    write(variant, [("ln_bwd", 32, 512, "fused", 4.0, "fused blocks=2 cluster"),
                    ("ln_bwd", 64, 512, "fused", 4.0, "fused blocks=4 cluster")])
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compare_sweeps.py"), str(base), str(variant),
                          "--label", "cluster"], capture_output=True, text=True, check=True).stdout
    assert "| 32 | 1.33 (fused) 4.00 |" in out
    assert "| 64 | 0.50 (tiled) 4.00 |" in out
    assert "cluster faster in 1 of 2 cells." in out
