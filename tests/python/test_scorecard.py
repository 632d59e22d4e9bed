"""bench/scorecard.py: the issue's targets counted from a peers JSON (no torch, no GPU)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import scorecard  # noqa: E402


def case(name, suite, times, floor_us):
    return {"suite": suite, "name": name, "family": "ln", "M": 1024, "N": 1024, "dtype": "bfloat16",
            "times": times, "errors": {}, "floor_us": floor_us}


def run_json(tmp_path, results, **meta):
    # 1000 GB/s = 1e6 bytes a microsecond: a floor of 8 us is the 8 MB line
    m = dict(commit="abc1234", gpu="NVIDIA H200", date="today", compile=True, copy_bandwidth_GBps=1000.0)
    m.update(meta)
    path = tmp_path / f"run-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps({"meta": m, "results": results}))
    return str(path)


def targets_of(paths):
    meta, results = scorecard.load(paths)
    targets, rows = scorecard.score(meta, results)
    return {t.key: t for t in targets}, rows


LARGE = {"fwd": 50.0, "gb": 50.0, "full": 100.0}


def test_targets_met_missed_and_unmeasured(tmp_path):
    path = run_json(tmp_path, [
        case("big_ok", "llm", {"normkit_full": 105.0, "eager_full": 200.0, "compile_full": 150.0,
                               "normkit_gb": 55.0, "eager_gb": 80.0,
                               "normkit_fwd": 52.0, "liger_fwd": 60.0, "eager_fwd": 70.0}, LARGE),
        case("big_miss", "seed", {"normkit_full": 130.0, "compile_full": 140.0, "eager_full": 300.0,
                                  "normkit_gb": 70.0, "eager_gb": 65.0,
                                  "normkit_fwd": 60.3, "compile_fwd": 60.0}, LARGE),
        case("tile8_small", "seed", {"normkit_full": 2.3, "eager_full": 5.0, "normkit_gb": 2.0, "eager_gb": 3.0,
                                     "normkit_fwd": 1.9, "compile_fwd": 1.8},
             {"fwd": 0.01, "gb": 0.01, "full": 0.02}),
        case("no_peer", "llm", {"normkit_full": 100.0, "normkit_gb": 50.0, "normkit_fwd": 50.0}, LARGE),
    ])
    t, rows = targets_of([path])
    # full backward: 95.2 % and 76.9 % of the floor on the large ones, 100 % where no peer ran; the small one is no large case
    assert [c for c, _ in t["full_floor"].met] == ["big_ok", "no_peer"]
    assert t["full_floor"].missed == [("big_miss", "76.9 %")]
    assert [c for c, _ in t["full_peer"].met] == ["big_ok"]  # 105 / 150 = 0.70x torch.compile
    assert t["full_peer"].missed == [("big_miss", "0.93x torch.compile")]
    assert t["full_peer"].unmeasured == ["no_peer"]  # no peer: not counted as met
    assert [c for c, _ in t["full_peer_all"].met] == ["big_ok", "tile8_small"]
    assert t["small"].met == [("tile8_small", "2.30 us")] and not t["small"].missed
    # gamma/beta: eager's time is the line; only seed cases count for gb_eager, every case for gb_eager_all
    assert t["gb_eager"].missed == [("big_miss", "1.077x eager")]  # parity: 3 decimals
    assert [c for c, _ in t["gb_eager"].met] == ["tile8_small"]
    assert t["gb_eager_all"].unmeasured == ["no_peer"]
    # forward: parity is the line, shown to 3 decimals (60.3 / 60 = 1.005 must not read as 1.00x)
    assert t["fwd_peer"].missed == [("big_miss", "1.005x torch.compile"), ("tile8_small", "1.056x torch.compile")]
    assert [c for c, _ in t["fwd_peer"].met] == ["big_ok"]
    assert rows[0]["full_peer"] == pytest.approx((0.7, "torch.compile"))


def test_the_report_names_a_gpu_other_than_the_h200(tmp_path):
    path = run_json(tmp_path, [case("big_ok", "llm", {"normkit_full": 95.0, "eager_full": 200.0}, LARGE)],
                    gpu="NVIDIA H100 80GB HBM3")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "scorecard.py"), path, "--md",
                          str(tmp_path / "card.md")], capture_output=True, text=True, check=True).stdout
    assert "**not the H200**" in out
    assert "- **full_peer** (full backward <= 0.85x the best peer, cases of >= 8 MB): met 1 / 1" in out
    assert (tmp_path / "card.md").read_text() == out


def test_the_report_says_when_a_run_reused_its_outputs(tmp_path):
    """Runs before RecentOutputs (no outputs_kept in their meta) read high where outputs fit in L2: said so."""
    big = [case("big_ok", "llm", {"normkit_full": 95.0, "eager_full": 200.0}, LARGE)]
    old, new = run_json(tmp_path, big), run_json(tmp_path, big, outputs_kept=True)

    def card(path):
        meta, results = scorecard.load([path])
        targets, rows = scorecard.score(meta, results)
        return scorecard.render(meta, targets, rows, [path])
    assert "**outputs reused**" in card(old)
    assert "**outputs reused**" not in card(new)


def test_parts_of_one_run_only(tmp_path):
    a = run_json(tmp_path, [case("a", "llm", {"normkit_full": 95.0, "eager_full": 200.0}, LARGE)])
    b = run_json(tmp_path, [case("b", "llm", {"normkit_full": 99.0, "eager_full": 100.0}, LARGE)])
    t, _ = targets_of([a, b])
    assert [c for c, _ in t["full_peer"].met] == ["a"] and [c for c, _ in t["full_peer"].missed] == ["b"]
    c = run_json(tmp_path, [], commit="other00")
    with pytest.raises(SystemExit, match="differ in commit"):
        scorecard.load([a, c])


# The counts that NOTES and the README quote from published peers runs on an H100: 38f21c6, the first with
# torch.compile compiled in every case (entry 99), and d11b867, the first with each call's outputs kept apart
# (RecentOutputs, entry 101).
PUBLISHED_COUNTS = {
    "h100-peers-38f21c6.json": dict(full_peer_all=(32, 41), full_peer=(28, 37), full_floor=(12, 37), small=(1, 4),
                                    gb_eager=(13, 13), gb_eager_all=(41, 41), fwd_floor=(29, 37), fwd_peer=(24, 41)),
    "h100-peers-d11b867.json": dict(full_peer_all=(32, 41), full_peer=(28, 37), full_floor=(12, 37), small=(1, 4),
                                    gb_floor=(18, 37), gb_eager_all=(41, 41), fwd_floor=(15, 37), fwd_peer=(21, 41)),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_the_published_h100_runs(name):
    path = os.path.join(ROOT, "bench", "results", name)
    t, rows = targets_of([path])
    counts = {k: (len(v.met), len(v.met) + len(v.missed)) for k, v in t.items()}
    assert len(rows) == 41
    assert {k: counts[k] for k in PUBLISHED_COUNTS[name]} == PUBLISHED_COUNTS[name]
    with open(path, encoding="utf-8") as f:  # the scorecard marks runs from before RecentOutputs
        assert bool(json.load(f)["meta"].get("outputs_kept")) == (name == "h100-peers-d11b867.json")


def test_a_case_in_two_parts_counts_once_from_the_later(tmp_path):
    """As `peers.py --merge` keeps it (the same reader): a re-run case replaces the earlier file's."""
    a = run_json(tmp_path, [case("a", "llm", {"normkit_full": 99.0, "eager_full": 100.0}, LARGE)])
    b = run_json(tmp_path, [case("a", "llm", {"normkit_full": 80.0, "eager_full": 100.0}, LARGE)])
    t, rows = targets_of([a, b])
    assert len(rows) == 1 and t["full_peer"].met == [("a", "0.80x eager")] and not t["full_peer"].missed
