"""bench/peers.py on the CPU (--cpu-smoke): every code path of the side-by-side script runs and
writes its table, so the GPU run it exists for does not fail on a Python error."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_peers(tmp_path, *extra, table=""):
    out = tmp_path / "peers.md"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "peers.py"), "--cpu-smoke", "--quick", "--calls", "2",
           "--replays", "1", "--commit", "test", "--out", str(out), *extra]
    env = dict(os.environ, NORMKIT_PLANNER_TABLE=table)  # "": the built-in table
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out.read_text(), json.loads((tmp_path / "peers.json").read_text())


def test_peers_cpu_smoke_writes_every_table(tmp_path):
    md, data = run_peers(tmp_path, "--suite", "seed")
    assert "CPU smoke run" in md
    # the built-in table of the machine's GPU (the H200's without one): normkit.planner_table()
    table = data["meta"]["planner_table"]
    assert table in ("built-in (H200)", "built-in (H100 SXM)") and f"; planner table: {table}" in md
    for title in ("dgamma/dbeta only", "full backward", "forward"):
        assert f"## {title}" in md
    assert len(data["results"]) == 13 and data["meta"]["complete"]
    ln = next(r for r in data["results"] if r["name"] == "tile256_large_fp32")
    # eager and normkit both measured (normkit through its CPU path), with normkit's plan
    for key in ("eager_fwd", "eager_gb", "eager_full", "normkit_fwd", "normkit_gb", "normkit_full"):
        assert ln["times"].get(key, 0) > 0, (key, ln["errors"])
    assert ln["normkit_plan_full"].split()[0] in ("simple", "tiled", "two_pass", "fused")


def test_peers_time_budget_lists_the_cases_not_run(tmp_path):
    table = os.path.join(ROOT, "bench", "results", "h100-tune-bf16-929409e.table")
    md, data = run_peers(tmp_path, "--suite", "seed,llm", "--time-budget", "0.000001", table=table)
    # a run under another planner table says so: its plans are not the built-in ones
    assert f"; planner table: {table}" in md and data["meta"]["planner_table"] == table
    assert data["meta"]["not_run"], "a spent budget leaves cases not run"
    assert "### Not run" in md
    assert len(data["results"]) + len(data["meta"]["not_run"]) == 13 + 28


def test_a_run_split_over_two_processes_merges_into_one_table(tmp_path):
    """A peers run too long for one device call runs in parts (--part, --cases) and --merge writes one table."""
    seed = ["tile8_small", "tile64_medium", "tile128_medium", "tile256_large", "tile256_bert", "tile256_large_bf16",
            "tile256_large_fp32", "two_pass_huge_M", "llm_hidden_4096", "gpt2_style", "rms_tile256", "rms_llm",
            "rms_two_pass"]
    parts = []
    for i, extra in enumerate((["--part", "1/2"], ["--part", "2/2"], ["--cases", "gpt2_style"])):
        part = tmp_path / f"part{i}"
        part.mkdir()
        md, data = run_peers(part, "--suite", "seed", *extra)
        parts.append(str(part / "peers.json"))
        if i < 2:  # every second case from the first or the second
            assert [r["name"] for r in data["results"]] == seed[i::2]
    out = tmp_path / "merged.md"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "peers.py"), "--merge", *parts, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "merged.json").read_text())
    # every case once, in the suite's order; a case in two parts is the later part's
    assert [r["name"] for r in data["results"]] == seed
    assert [r["cases"] for r in data["meta"]["runs"]] == [7, 5, 1]
    md = out.read_text()
    assert md.count("(merged)") == 3 and md.count("| gpt2_style |") == 3  # one row in each op's table
    # runs of another commit are not one table
    other = json.loads(open(parts[1]).read())
    other["meta"]["commit"] = "other"
    (tmp_path / "other.json").write_text(json.dumps(other))
    proc = subprocess.run(cmd[:3] + [parts[0], str(tmp_path / "other.json"), "--out", str(tmp_path / "x.md")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "commit differ" in proc.stderr and not (tmp_path / "x.md").exists()
    # a part that is not one
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "peers.py"), "--cpu-smoke", "--part", "3/2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "K must be 1..N" in proc.stderr


def test_peer_kernels_describes_cases_in_normkit_bench_spelling():
    """gpu-check's profile-peers stage times normkit-bench on the shape bench/peer_kernels.py names."""
    script = os.path.join(ROOT, "bench", "peer_kernels.py")
    proc = subprocess.run([sys.executable, script, "--cases", "tile8_small,rms_llama_16384x8192_bf16", "--describe"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["32 512 f16 ln", "16384 8192 bf16 rms"]
    bad = subprocess.run([sys.executable, script, "--cases", "no_such_case", "--describe"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown case" in bad.stderr


def test_host_overhead_writes_a_row_per_case(tmp_path):
    """gpu-check's host stage (CPU tensors without a GPU): every case of bench/host_overhead.py runs on
    both sides and gets a row."""
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    md = tmp_path / "host.md"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "host_overhead.py"), "--calls", "3", "--runs", "1",
           "--dtypes", "bf16", "--md", str(md), "--device", device]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in md.read_text().splitlines() if line.startswith("| ") and "bf16" in line]
    names = [row.split("|")[1].strip() for row in rows]
    for case in ("ln_fwd", "ln_bwd", "ln_train", "rms_fwd", "rms_train", "ln_fwd_ops", "ln_train_ops", "rms_fwd_ops",
                 "empty"):
        assert case in names, (case, names)
    for row in rows:
        if not row.startswith("| empty"):
            assert float(row.split("|")[4]) > 0, row  # normkit's µs per call


def load_peers_module(monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("nk_peers", os.path.join(ROOT, "bench", "peers.py"))
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    monkeypatch.setattr(peers, "SMOKE", True)  # host timing: no graphs, the calls run when timed
    return peers


def test_peers_of_an_op_take_turns_from_a_different_peer_each_round(monkeypatch):
    peers = load_peers_module(monkeypatch)
    log = []
    timer = peers.Timer(calls=1, replays=3, l2_bytes=0, warm_ms=0)
    named = [(k, (lambda k: lambda i: log.append(k))(k)) for k in ("a", "b", "c")]
    times, errors = timer.side_by_side(named, sets=1)
    assert errors == {} and sorted(times) == ["a", "b", "c"]
    # one untimed pass (warm_ms = 0), then round r starts at peer r mod 3, up the list in even rounds and
    # down it in odd ones
    assert log == ["a", "b", "c", "a", "b", "c", "b", "a", "c", "c", "a", "b"]


def test_a_peer_that_fails_is_reported_and_left_out_of_the_turns(monkeypatch):
    peers = load_peers_module(monkeypatch)
    log, calls = [], {"b": 0}

    def b(i):
        calls["b"] += 1
        if calls["b"] == 2:
            raise RuntimeError("b broke")
        log.append("b")

    timer = peers.Timer(calls=1, replays=2, l2_bytes=0, warm_ms=0)
    times, errors = timer.side_by_side([("a", lambda i: log.append("a")), ("b", b)], sets=1)
    assert sorted(times) == ["a"] and errors == {"b": "RuntimeError: b broke"}
    assert log == ["a", "b", "a", "a"]  # warm pass a b; round 0: a, b fails; round 1: a alone


def test_sequential_times_each_peer_whole(monkeypatch):
    peers = load_peers_module(monkeypatch)
    log = []
    timer = peers.Timer(calls=1, replays=2, l2_bytes=0, warm_ms=0, sequential=True)
    times, errors = timer.side_by_side([(k, (lambda k: lambda i: log.append(k))(k)) for k in ("a", "b")], sets=1)
    assert errors == {} and sorted(times) == ["a", "b"]
    assert log == ["a", "a", "a", "b", "b", "b"]  # each: one untimed replay, then its two timed ones


def test_an_op_whose_graphs_do_not_fit_side_by_side_is_timed_one_peer_at_a_time(monkeypatch):
    peers = load_peers_module(monkeypatch)
    log = []

    def a(i):
        log.append("a")

    def b(i):
        log.append("b")

    real_prepare = peers.Timer.prepare
    b_prepared = []

    def prepare(self, fn, sets):  # b's capture fails beside a's graph (its first), not alone (its second)
        if fn is b:
            b_prepared.append(True)
            if len(b_prepared) == 1:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        return real_prepare(self, fn, sets)

    monkeypatch.setattr(peers.Timer, "prepare", prepare)
    timer = peers.Timer(calls=1, replays=1, l2_bytes=0, warm_ms=0)
    times, errors = timer.side_by_side([("eager_full", a), ("liger_full", b)], sets=1)
    assert errors == {} and sorted(times) == ["eager_full", "liger_full"]
    assert timer.one_at_a_time_keys == ["eager_full"]
    assert log == ["a", "a", "b", "b"]  # each alone: one untimed replay, then its timed one


def test_the_compile_peer_compiles_every_case_past_dynamos_recompile_limit(monkeypatch):
    """Dynamo compiles at most 8 shapes of one function and runs the rest eagerly without an error: the
    peers run's 'compile' column timed eager ATen from a family's 9th case on (NOTES entry 98). Every case
    is compiled anew, with fullgraph=True, so that a fallback raises instead of being timed."""
    import torch
    from torch._dynamo.utils import counters
    peers = load_peers_module(monkeypatch)
    for family in ("ln", "rms"):
        for n in range(8, 8 + 8 * 10, 8):  # 10 shapes of one compiled function
            case = {"M": 3, "N": n, "dtype": "float32", "family": family}
            s = peers.make_sets(case, 1, device="cpu")[0]
            graphs = counters["stats"]["unique_graphs"]
            fwd, full = peers.compiled_ops(family, n, backend="eager")
            eager_fwd, _gb, eager_full = peers.eager_ops(family, n)
            pairs = [(fwd, eager_fwd)] + ([(full, eager_full)] if family == "ln" else [])  # no CPU RMSNorm backward
            for compiled, eager in pairs:
                for got, want in zip(compiled(s), eager(s)):
                    torch.testing.assert_close(got, want)
            assert counters["stats"]["unique_graphs"] == graphs + len(pairs), (family, n)  # compiled, not eager


def test_captured_outputs_are_kept_until_the_limit_of_later_outputs_follows(monkeypatch):
    """RecentOutputs: a call's output memory is reused only after `limit` bytes of other outputs (the output
    twin of the buffer sets' rotation), and outputs of `limit` bytes or more are not kept at all."""
    import torch
    peers = load_peers_module(monkeypatch)
    ring = peers.RecentOutputs(limit=100)
    outs = [torch.empty(10, dtype=torch.float32) for _ in range(6)]  # 40 bytes each
    for k, out in enumerate(outs):
        ring.add((out, None))  # a backward's result: a tuple with an undefined gradient
        kept = [o[0] for o, _ in ring.kept]
        assert kept[-1] is out
        assert ring.bytes == 40 * len(kept)
        # every kept output but the oldest adds up to less than the limit; all of them, once there are
        # enough calls, to at least the limit: the next allocation cannot reuse memory written since
        assert ring.bytes - 40 < 100
        assert ring.bytes >= 100 or k < 2
    assert [o[0] for o, _ in ring.kept] == outs[-3:]
    big = torch.empty(25, dtype=torch.float32)  # 100 bytes: not kept
    ring.add(big)
    assert all(o is not big for o, _ in ring.kept) and len(ring.kept) == 3
    assert peers.tensor_bytes([torch.empty(3, dtype=torch.float16), None, (torch.empty(2),)]) == 6 + 8
