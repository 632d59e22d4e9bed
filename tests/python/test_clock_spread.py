"""bench/clock_spread.py: kernel times beside the clocks sampled in each invocation's window (no torch needed)."""
import datetime
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T0 = datetime.datetime(2026, 12, 4, 20, 0, 0)


def stamp(seconds):
    return (T0 + datetime.timedelta(seconds=seconds)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def write_run(path, time_us, window=None):
    records = [{"case": "4096x262144", "op": "ln_bwd", "dtype": "bf16", "strategy": "auto", "mode": "graph",
                "ok": True, "time_us": time_us}]
    if window:  # normkit-bench's own window of the record (unix ms)
        records[0]["wall_start_ms"], records[0]["wall_end_ms"] = window
    path.write_text(json.dumps({"meta": {}, "records": records}))
    return str(path)


def test_each_invocation_gets_the_samples_of_its_window(tmp_path):
    # two invocations: the first at 1980 MHz, the second at 1800 MHz (power capped), and a sample outside both
    samples = ["timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, reasons",
               f"{stamp(0.5)}, 1980, 3201, 500.1, 60, 0x0000000000000000",
               f"{stamp(0.6)}, 1980, 3201, 520.3, 61, 0x0000000000000000",
               f"{stamp(1.5)}, 1500, 3201, 100.0, 55, 0x0000000000000001",  # between the windows: ignored
               f"{stamp(2.5)}, 1800, 3201, 690.0, 70, 0x0000000000000004",
               f"{stamp(2.6)}, 1760, 3201, 700.0, 71, 0x0000000000000004",
               f"{stamp(2.7)}, [N/A], 3201, 700.0, 71, 0x0000000000000004"]  # does not parse: skipped
    (tmp_path / "clocks.csv").write_text("\n".join(samples) + "\n")
    t0 = T0.timestamp()
    first = write_run(tmp_path / "r1.json", 1650.0)
    # the second invocation's window holds all the samples after 1 s; its record's own window only the last two
    second = write_run(tmp_path / "r2.json", 1815.0, (int(t0 * 1000) + 2550, int(t0 * 1000) + 2800))
    (tmp_path / "windows.txt").write_text(f"{first} {t0 + 0.4} {t0 + 1.0}\n{second} {t0 + 1.2} {t0 + 3.0}\n")
    md = tmp_path / "clocks.md"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "clock_spread.py"), "--windows",
                          str(tmp_path / "windows.txt"), "--samples", str(tmp_path / "clocks.csv"), "--md", str(md)],
                         capture_output=True, text=True, check=True).stdout
    assert md.read_text() == out
    rows = [line for line in out.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert "1650.00 | 1980 / 1980 | 3201 | 510 | 61 | 0x0000000000000000 |" in rows[0]
    assert "1815.00 | 1760 / 1760 | 3201 | 700 | 71 | 0x0000000000000004 |" in rows[1]
    summary = [line for line in out.splitlines() if line.startswith("| 4096x262144 | ln_bwd | bf16 | auto | 2 |")]
    assert summary == [f"| 4096x262144 | ln_bwd | bf16 | auto | 2 | {1815 / 1650:.3f} | {1980 / 1760:.3f} |"]
