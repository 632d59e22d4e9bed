"""bench/compare_ab.py: the two-build A/B report it prints from normkit-bench JSON runs (no torch needed)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(path, rows):
    records = [{"case": case, "op": op, "dtype": "bf16", "strategy": "fused", "mode": "graph", "ok": ok,
                "time_us": t, "plan": plan} for case, op, t, ok, plan in rows]
    path.write_text(json.dumps({"meta": {"tool": "normkit-bench"}, "records": records}))
    return str(path)


def run(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "compare_ab.py"), *args], capture_output=True,
                          text=True, check=True).stdout


def test_ratio_of_means_and_whether_the_runs_overlap(tmp_path):
    a1 = write(tmp_path / "a1.json", [("1024x1024", "ln_bwd", 7.6, True, "fused blocks=128"),
                                      ("4096x1024", "ln_bwd", 12.9, True, "fused blocks=132"),
                                      ("32x512", "ln_bwd", 5.0, True, "fused blocks=2")])
    a2 = write(tmp_path / "a2.json", [("1024x1024", "ln_bwd", 7.7, True, "fused blocks=128"),
                                      ("4096x1024", "ln_bwd", 12.8, True, "fused blocks=132"),
                                      ("32x512", "ln_bwd", 5.0, True, "fused blocks=2")])
    b1 = write(tmp_path / "b1.json", [("1024x1024", "ln_bwd", 8.3, True, "fused blocks=128"),
                                      ("4096x1024", "ln_bwd", 12.85, True, "fused blocks=132 one-launch"),
                                      ("32x512", "ln_bwd", 0.0, False, "")])
    b2 = write(tmp_path / "b2.json", [("1024x1024", "ln_bwd", 8.3, True, "fused blocks=128"),
                                      ("4096x1024", "ln_bwd", 12.95, True, "fused blocks=132 one-launch")])
    md = tmp_path / "ab.md"
    out = run("--a", a1, a2, "--b", b1, b2, "--labels", "base", "new", "--md", str(md))
    assert md.read_text() == out
    lines = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and "x" in line}
    slower = lines["1024x1024"]
    assert "7.60 / 7.70" in slower and "8.30 / 8.30" in slower
    assert f"{8.3 / 7.65:.3f}" in slower and "slower" in slower
    assert "ranges overlap" in lines["4096x1024"]  # 12.8..12.9 against 12.85..12.95
    # a plan that changed between the builds is named; a failed run is listed, not dropped
    assert "Plans that differ" in out and "fused blocks=132 one-launch" in out
    assert "32x512 ln_bwd bf16 fused graph: base ok, new failed" in out
