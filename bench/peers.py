#!/usr/bin/env python3
"""normkit vs its peers on one GPU, in one process, one timing method.

Peers (each only when importable):
  eager     torch.ops.aten.native_layer_norm(_backward) / _fused_rms_norm(_backward)
  compile   torch.compile of the same eager forward and full backward (Inductor's Triton kernels), compiled
            anew each case with fullgraph=True: never a silent eager fallback
  liger     Liger-Kernel's LayerNorm / RMSNorm autograd functions (import liger_kernel; --liger-path)
  apex      apex.normalization fused_layer_norm_affine / fused_rms_norm_affine
  quack     quack.rmsnorm (RMSNorm only)
  normkit   torch.ops.normkit.* (import normkit), strategy "auto"

Ops per case: gb = dgamma/dbeta only (output_mask [F,T,T] / [F,T]), full = dX + dgamma (+ dbeta),
fwd = forward. Shapes: the seed's 13 cases and the LLM shapes (bf16 and fp16, LN and RMS).

Timing (same for every peer): the call is captured 20 times into one CUDA graph (inputs rotate over
buffer sets until they exceed 3x L2, at most 1024 sets, and each call's outputs stay allocated until 3x L2 of
later outputs follow, so that bandwidth is not served from cache either way). The peers
of one op (forward, gamma/beta, full backward) are timed side by side: every graph is captured and replayed
once, then all are replayed in turn, untimed, for at least --warm-ms (25 ms: the GPU's clocks are back up after
the idle time of compiling and building inputs before each case), then 5 rounds of one timed replay each, round
r starting at peer r mod count and going up the list in even rounds, down it in odd ones, so that a drift of
the clocks or power over a case, or one peer's effect on the next, falls on every peer alike;
the median replay / 20 is the kernel time (launch overhead excluded). Floors: bytes that must move (/work/shared/norm-math.md) over a device-to-device
copy bandwidth measured in the same process.

Writes --out (markdown, default bench/results/h200-peers.md) and a JSON next to it, after every case
(a run stopped by --time-budget or killed still leaves a table). --cpu-smoke runs every code path
on the CPU with tiny shapes and plain wall-clock timing: a check of this script without a GPU, not a
measurement (its table says so).
"""
import argparse
import datetime
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

# Expandable segments for the caching allocator, set before torch starts CUDA (a user's own setting wins): with
# them the reserved memory of the 41 cases grew to 50 GiB instead of 66 (H100, 4f3de59 against 289e9ff, where the
# last case ran out of memory). A probe then found that memory in free segments of the warm-up streams, one new
# stream per prepared peer, which Timer.warm_stream makes a single one (docs/NOTES.md entry 100; with both, the whole
# run at d11b867 held 8.4 GiB at most, entry 101). Kernel times are not affected: memory is mapped when a buffer set
# or a graph is made, outside the timed replays.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402

# ----------------------------------------------------------------------------------------------
# cases

SEED = [  # name, family, dims, dtype
    ("tile8_small", "ln", (32, 512), "float16"),
    ("tile64_medium", "ln", (96, 768), "float16"),
    ("tile128_medium", "ln", (192, 1024), "bfloat16"),
    ("tile256_large", "ln", (4096, 1024), "float16"),
    ("tile256_bert", "ln", (1024, 768), "float16"),
    ("tile256_large_bf16", "ln", (4096, 1024), "bfloat16"),
    ("tile256_large_fp32", "ln", (4096, 1024), "float32"),
    ("two_pass_huge_M", "ln", (131072, 64), "float16"),
    ("llm_hidden_4096", "ln", (32, 4096, 4096), "bfloat16"),
    ("gpt2_style", "ln", (8, 1024, 768), "float16"),
    ("rms_tile256", "rms", (4096, 1024), "float16"),
    ("rms_llm", "rms", (32, 4096, 4096), "bfloat16"),
    ("rms_two_pass", "rms", (131072, 64), "float16"),
]

LLM_SHAPES = [  # name, M, N
    ("llm_131072x4096", 131072, 4096),
    ("llama_16384x8192", 16384, 8192),
    ("wide_2048x65536", 2048, 65536),
    ("gpt2_8192x768", 8192, 768),
    ("odd_8192x1000", 8192, 1000),
    ("huge_m_131072x64", 131072, 64),
    ("wide_4096x262144", 4096, 262144),
]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}

SMOKE = False  # --cpu-smoke: CPU tensors, tiny shapes, wall-clock timing (checks the script, measures nothing)
DEVICE = "cuda"


def sync():
    if not SMOKE:
        torch.cuda.synchronize()


def smoke_case(case):
    """--cpu-smoke: the case cut down to at most 64 x 256, in float32 (ATen's CPU LayerNorm returns
    16-bit mean/rstd for 16-bit inputs, where CUDA and normkit use float32)."""
    return dict(case, M=min(case["M"], 64), N=min(case["N"], 256), dtype="float32")


def build_cases(suites):
    cases = []
    if "seed" in suites:
        for name, fam, dims, dt in SEED:
            m = math.prod(dims[:-1])
            cases.append(dict(suite="seed", name=name, family=fam, M=m, N=dims[-1], dtype=dt,
                              shape=str(tuple(dims))))
    if "llm" in suites:
        for dt in ("bfloat16", "float16"):
            for fam in ("ln", "rms"):
                for name, m, n in LLM_SHAPES:
                    cases.append(dict(suite="llm", name=f"{fam}_{name}_{'bf16' if dt == 'bfloat16' else 'fp16'}",
                                      family=fam, M=m, N=n, dtype=dt, shape=f"({m}, {n})"))
    return cases


def floor_bytes(op, family, m, n, e, ew):
    """Bytes that must move: /work/shared/norm-math.md (RMS gb: 2MNe + 4M + N e_w)."""
    if family == "ln":
        return {"fwd": 2 * m * n * e + 8 * m + 2 * n * ew,
                "full": 3 * m * n * e + 8 * m + 3 * n * ew,
                "gb": 2 * m * n * e + 8 * m + 2 * n * ew}[op]
    return {"fwd": 2 * m * n * e + 4 * m + n * ew,
            "full": 3 * m * n * e + 4 * m + 2 * n * ew,
            "gb": 2 * m * n * e + 4 * m + n * ew}[op]


# ----------------------------------------------------------------------------------------------
# timing

def tensor_bytes(out):
    """Bytes of the tensors in a call's result (a tensor, or a tuple / list of them and None)."""
    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, (tuple, list)):
        return sum(tensor_bytes(o) for o in out)
    return 0


class RecentOutputs:
    """The outputs of the last captured calls, kept alive until more than `limit` bytes of later outputs follow
    them, so that an output's memory is written again only after that many bytes of others, as each buffer
    set's inputs are read again only after the other sets'. Freed at once, every call's output in one graph
    takes the same address from the graph's pool, and an output that fits in L2 may be written to L2 again and
    again instead of reaching memory: the likeliest reason this script timed normkit's forward of 131072 x 64
    fp16 (y 16.8 MB) at 12.1 us, 94.5 % of the floor, where normkit-bench (fresh outputs in each buffer set)
    times the same kernel at 14.1, 81 % (H100, 4f3de59 / 289e9ff; docs/NOTES.md entry 100). With this class the
    run at d11b867 timed it at 14.16 us against normkit-bench's 14.07 (entry 101). An output of `limit` bytes or
    more is not kept: L2 holds a small share of it, and keeping it would double a large case's memory."""
    def __init__(self, limit):
        self.limit, self.kept, self.bytes = limit, [], 0

    def add(self, out):
        size = tensor_bytes(out)
        if size >= self.limit:
            return
        self.kept.append((out, size))
        self.bytes += size
        while self.bytes - self.kept[0][1] >= self.limit:
            self.bytes -= self.kept.pop(0)[1]


class Timer:
    # at most 1024 sets, as normkit-bench (--max-sets): at 64 the smallest seed cases (32 x 512 fp16: 4.2 MB
    # in 64 sets) were timed from L2 while normkit-bench and bench/streaming_ceiling.cu read them from DRAM
    def __init__(self, calls, replays, l2_bytes, l2_factor=3.0, max_sets=1024, warm_ms=25.0, sequential=False):
        self.calls, self.replays, self.warm_ms, self.sequential = calls, replays, warm_ms, sequential
        self.one_at_a_time_keys = []   # the first key of each op timed one at a time (memory, capture)
        self.l2_bytes, self.l2_factor, self.max_sets = l2_bytes, l2_factor, max_sets
        # One side stream for every warm-up, made on first use. The caching allocator keeps a stream's freed
        # blocks for that stream alone, and empty_cache did not return them: with a new stream per prepared
        # peer, each one's warm-up outputs stayed reserved in a free segment of its own (a probe of 4 cases at
        # 4f3de59 on an H100: 16.8 GiB reserved, nothing allocated, in free segments: the default stream's 4.0 GiB
        # and at least 11 side streams' 0.02-3.1 GiB each; the whole run reached 50 GiB by its 41st case).
        self.warm_stream = None

    def sets_for(self, input_bytes):
        want = math.ceil(self.l2_factor * self.l2_bytes / max(input_bytes, 1))
        return max(1, min(want, self.max_sets))

    def calls_for(self, sets):
        """Calls captured in one graph: at least --calls, and a whole number of rotations of the sets."""
        return self.calls if sets <= 1 else math.ceil(max(self.calls, sets) / sets) * sets

    def prepare(self, fn, sets):
        """fn(i) runs one call on buffer set i. Returns a function that times one replay of every set in
        turn (`calls` calls; µs a call): on a GPU one CUDA graph of them, captured now and replayed once."""
        calls = self.calls_for(sets)
        if SMOKE:
            def host_run():
                t0 = time.perf_counter()
                for i in range(calls):
                    fn(i % sets)
                return (time.perf_counter() - t0) * 1e6 / calls
            return host_run
        if self.warm_stream is None:
            self.warm_stream = torch.cuda.Stream()
        stream = self.warm_stream
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside capture (compilation, allocator)
            for i in range(min(3, calls)):
                fn(i % sets)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        recent = RecentOutputs(self.l2_factor * self.l2_bytes)
        with torch.cuda.graph(graph):
            for i in range(calls):
                recent.add(fn(i % sets))
        del recent  # (the graph's pool keeps the addresses its replays write)
        graph.replay()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def graph_run():
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) * 1000.0 / calls
        return graph_run

    def side_by_side(self, named, sets):
        """named: [(key, fn)] of one op, fn(i) one call on buffer set i. Every fn is made ready (prepare),
        then all are replayed in turn, untimed, for at least warm_ms, then `replays` rounds of one timed
        replay each in round_order: a drift of the clocks or power over the case falls on
        every peer alike (with `sequential`, each fn is timed whole in turn, as before NOTES entry 96).
        Where the graphs do not fit beside each other (out of memory) or a capture fails beside them, the
        op's fns are timed one at a time instead, and `one_at_a_time` lists the first of them.
        Returns ({key: (median µs a call, calls)}, {key: error})."""
        if self.sequential and len(named) > 1:
            return self.one_at_a_time(named, sets)
        ready, errors = {}, {}
        side_by_side_failed = False
        for key, fn in named:
            try:
                ready[key] = self.prepare(fn, sets)
            except Exception as ex:  # noqa: BLE001
                if len(named) > 1 and (isinstance(ex, torch.cuda.OutOfMemoryError) or "capture" in str(ex)):
                    side_by_side_failed = True
                    break  # out of the except block first: the exception's traceback holds the failed graph
                errors[key] = error_text(ex)
                sync()
        if side_by_side_failed:
            ready.clear()
            release_memory()
            self.one_at_a_time_keys.append(named[0][0])
            return self.one_at_a_time(named, sets)
        keys = list(ready)
        # Untimed replays for warm_ms: a case follows host-only work (torch.compile, input building) that
        # leaves the GPU idle, and its clocks come back over milliseconds -- longer than the timed replays
        # of a tiny case take (the peers run at b805800, after 71 s of pip on that host, timed every peer's
        # smallest cases 0.2-1.4 us slower than a3f6163's run; docs/NOTES.md entry 89).
        deadline = time.perf_counter() + self.warm_ms / 1000.0
        first = True
        while keys and (first or time.perf_counter() < deadline):
            first = False
            for key in list(keys):
                try:
                    ready[key]()
                except Exception as ex:  # noqa: BLE001
                    errors[key] = error_text(ex)
                    keys.remove(key)
                    sync()
        times = {key: [] for key in keys}
        for r in range(self.replays):
            for key in round_order(keys, r):
                if key in errors:
                    continue
                try:
                    times[key].append(ready[key]())
                except Exception as ex:  # noqa: BLE001
                    errors[key] = error_text(ex)
                    sync()
        calls = self.calls_for(sets)
        return {k: (statistics.median(v), calls) for k, v in times.items() if k not in errors and v}, errors

    def one_at_a_time(self, named, sets):
        """Each fn made ready, warmed and timed whole in turn, its graph freed before the next."""
        times, errors = {}, {}
        for one in named:  # one fn: never timed one at a time again
            t, e = self.side_by_side([one], sets)
            times.update(t)
            errors.update(e)
            release_memory()
        return times, errors


def drop_autograd_outputs(sets):
    """Deletes the autograd peers' retained y from each buffer set. A function of its own, so that no name
    outlives it: the loop's variable, left in the case loop, kept the last set's x and dy allocated until the
    next case replaced it (2x the case's x bytes, 4 GiB after 4096 x 262144 bf16; NOTES entries 97, 99)."""
    for s in sets:
        for key in [k for k in s if k.startswith("_ag_")]:
            del s[key]


def held_memory():
    """Where reserved memory that holds no tensor sits, when over 1 GiB (a case line's tail), from the allocator's
    snapshot: CUDA graphs' private pools (a graph kept alive), default-pool segments that a small tensor pins,
    free default-pool segments (which empty_cache should have returned), and what the snapshot does not show.
    At 4f3de59 on an H100 the first two held nothing while reserved grew to 50 GiB (docs/NOTES.md entry 100)."""
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    if reserved - allocated < 1 << 30:
        return ""
    pools, pinned, pinned_live, free_segments = {}, 0, 0, 0
    for seg in torch.cuda.memory_snapshot():
        pool = tuple(seg.get("segment_pool_id") or (0, 0))
        if pool != (0, 0):
            size, live = pools.get(pool, (0, 0))
            pools[pool] = (size + seg["total_size"], live + seg["allocated_size"])
        elif seg["allocated_size"]:
            pinned, pinned_live = pinned + seg["total_size"], pinned_live + seg["allocated_size"]
        else:
            free_segments += seg["total_size"]
    in_pools = sum(size for size, _ in pools.values())
    unseen = reserved - in_pools - pinned - free_segments
    return (f"; held: {in_pools / 2**30:.1f} GiB in {len(pools)} graph pools "
            f"({sum(live for _, live in pools.values()) / 2**20:.0f} MiB live), {pinned / 2**30:.1f} GiB in default "
            f"segments pinned by {pinned_live / 2**20:.0f} MiB live, {free_segments / 2**30:.1f} GiB in free default "
            f"segments, {unseen / 2**30:.1f} GiB not in the snapshot")


def release_memory():
    """Frees what the last graphs held: unreachable objects first (a failed capture's graph and its memory pool
    can sit in a reference cycle of its traceback's frames), then the allocator's cached blocks."""
    gc.collect()
    if SMOKE:
        return
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001  (an error left by a failed capture: reported where it happened)
        pass
    torch.cuda.empty_cache()


def round_order(keys, r):
    """Round r's turns, as normkit-bench's round_turn: from key r mod count, up the list in even rounds and
    down it in odd ones, so a peer follows a different one from round to round."""
    if not keys:
        return []
    first = r % len(keys)
    step = 1 if r % 2 == 0 else -1
    return [keys[(first + step * j) % len(keys)] for j in range(len(keys))]


def error_text(ex):
    return f"{type(ex).__name__}: {str(ex).splitlines()[0][:200] if str(ex) else ''}"


def copy_bandwidth(nbytes=1 << 30, repeats=10):
    if SMOKE:
        a = torch.full((1 << 24,), 7, dtype=torch.uint8)
        b = torch.empty_like(a)
        t0 = time.perf_counter()
        b.copy_(a)
        return 2 * a.numel() / max(time.perf_counter() - t0, 1e-9), a.numel()
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(7)
    b = torch.empty_like(a)
    b.copy_(a)
    best = 0.0
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        start.record()
        b.copy_(a)
        stop.record()
        stop.synchronize()
        best = max(best, 2 * nbytes / (start.elapsed_time(stop) * 1e-3))
    del a, b
    torch.cuda.empty_cache()
    return best, nbytes


# ----------------------------------------------------------------------------------------------
# peers

def eager_ops(family, n):
    aten = torch.ops.aten
    if family == "ln":
        def fwd(s):
            return aten.native_layer_norm(s["x"], [n], s["w"], s["b"], 1e-5)

        def bwd(s, mask):
            return aten.native_layer_norm_backward(s["dy"], s["x"], [n], s["mean"], s["rstd"], s["w"], s["b"], mask)
        return fwd, (lambda s: bwd(s, [False, True, True])), (lambda s: bwd(s, [True, True, True]))

    def rfwd(s):
        return aten._fused_rms_norm(s["x"], [n], s["w"], 1e-6)

    def rbwd(s, mask):
        return aten._fused_rms_norm_backward(s["dy"], s["x"], [n], s["rstd"], s["w"], mask)
    return rfwd, (lambda s: rbwd(s, [False, True])), (lambda s: rbwd(s, [True, True]))


def compiled_ops(family, n, backend="inductor"):
    """torch.compile of the eager forward and full backward (the decompositions Inductor fuses), compiled
    anew for this case. Dynamo keeps at most recompile_limit (8) compiled shapes of one function and runs
    every further shape eagerly, with a log line and no error: before this reset, from the 9th shape of a
    family on, the 'compile' column timed eager ATen (docs/NOTES.md entry 98). fullgraph=True turns any
    such fallback (the limit, a graph break) into an error, reported under "Not measured" instead of timed.
    `backend`: "eager" in the CPU tests (Dynamo's guards and limits without Inductor's compile time)."""
    import torch._dynamo  # noqa: F401 -- loaded on first use
    torch._dynamo.reset()

    def compiled(fn):
        return torch.compile(fn, dynamic=False, fullgraph=True, backend=backend)
    if family == "ln":
        cf = compiled(lambda x, w, b: torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5))
        cb = compiled(lambda dy, x, mean, rstd, w, b: torch.ops.aten.native_layer_norm_backward(
            dy, x, [n], mean, rstd, w, b, [True, True, True]))
        return (lambda s: cf(s["x"], s["w"], s["b"]),
                lambda s: cb(s["dy"], s["x"], s["mean"], s["rstd"], s["w"], s["b"]))
    cf = compiled(lambda x, w: torch.ops.aten._fused_rms_norm(x, [n], w, 1e-6))
    cb = compiled(lambda dy, x, rstd, w: torch.ops.aten._fused_rms_norm_backward(dy, x, [n], rstd, w, [True, True]))
    return (lambda s: cf(s["x"], s["w"]), lambda s: cb(s["dy"], s["x"], s["rstd"], s["w"]))


def autograd_ops(module_fn, key):
    """A peer exposing only an autograd function y = f(x, w, b): forward = f; full backward =
    torch.autograd.grad of a y computed once per buffer set (retain_graph), kept in the set under `key`
    (the peers' full backwards are timed side by side, each with its own)."""
    def prepare(s, family):
        x = s["x"].detach().requires_grad_()
        w = s["w"].detach().requires_grad_()
        b = s["b"].detach().requires_grad_() if family == "ln" else None
        y = module_fn(x, w, b)
        s[key] = (x, w, b, y)

    def fwd(s):
        return module_fn(s["x"], s["w"], s["b"])

    def full(s):
        x, w, b, y = s[key]
        inputs = (x, w) if b is None else (x, w, b)
        return torch.autograd.grad(y, inputs, s["dy"], retain_graph=True)
    return prepare, fwd, full


def optional_peers(family, n, liger_path):
    """name -> (prepare, fwd, full) for importable optional peers."""
    peers, notes = {}, []
    if liger_path and liger_path not in sys.path:
        sys.path.insert(0, liger_path)
    try:
        if family == "ln":
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            fn = lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)  # noqa: E731
        else:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            fn = lambda x, w, b: LigerRMSNormFunction.apply(x, w, 1e-6)  # noqa: E731
        peers["liger"] = autograd_ops(fn, "_ag_liger")
    except Exception as e:  # noqa: BLE001  (any import/API mismatch means "not available")
        notes.append(f"liger: {type(e).__name__}: {e}")
    try:
        if family == "ln":
            from apex.normalization.fused_layer_norm import fused_layer_norm_affine
            fn = lambda x, w, b: fused_layer_norm_affine(x, w, b, (n,), 1e-5)  # noqa: E731
        else:
            from apex.normalization.fused_layer_norm import fused_rms_norm_affine
            fn = lambda x, w, b: fused_rms_norm_affine(x, w, (n,), 1e-6)  # noqa: E731
        peers["apex"] = autograd_ops(fn, "_ag_apex")
    except Exception as e:  # noqa: BLE001
        notes.append(f"apex: {type(e).__name__}: {e}")
    if family == "rms":
        try:
            from quack.rmsnorm import rmsnorm as quack_rmsnorm
            peers["quack"] = autograd_ops(lambda x, w, b: quack_rmsnorm(x, w, eps=1e-6), "_ag_quack")
        except Exception as e:  # noqa: BLE001
            notes.append(f"quack: {type(e).__name__}: {e}")
    return peers, notes


def normkit_ops(family, n):
    ops = torch.ops.normkit
    if family == "ln":
        return (lambda s: ops.layer_norm_forward(s["x"], [n], s["w"], s["b"], 1e-5),
                lambda s: ops.layer_norm_backward(s["dy"], s["x"], [n], s["mean"], s["rstd"], s["w"], s["b"],
                                                  [False, True, True], "auto"),
                lambda s: ops.layer_norm_backward(s["dy"], s["x"], [n], s["mean"], s["rstd"], s["w"], s["b"],
                                                  [True, True, True], "auto"))
    return (lambda s: ops.rms_norm_forward(s["x"], [n], s["w"], 1e-6),
            lambda s: ops.rms_norm_backward(s["dy"], s["x"], [n], s["rstd"], s["w"], [False, True], "auto"),
            lambda s: ops.rms_norm_backward(s["dy"], s["x"], [n], s["rstd"], s["w"], [True, True], "auto"))


# ----------------------------------------------------------------------------------------------

def make_sets(case, nsets, device=None):
    device = device or DEVICE
    m, n, dt = case["M"], case["N"], DTYPES[case["dtype"]]
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    w = torch.randn(n, device=device, dtype=dt, generator=gen)
    b = torch.randn(n, device=device, dtype=dt, generator=gen) if case["family"] == "ln" else None
    sets = []
    for _ in range(nsets):
        x = torch.randn(m, n, device=device, dtype=dt, generator=gen)
        dy = torch.randn(m, n, device=device, dtype=dt, generator=gen)
        s = {"x": x, "dy": dy, "w": w, "b": b}
        if case["family"] == "ln":
            _, s["mean"], s["rstd"] = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
        else:
            _, s["rstd"] = torch.ops.aten._fused_rms_norm(x, [n], w, 1e-6)
        sets.append(s)
    return sets


def run(args):
    t_start = time.time()
    torch.manual_seed(0)
    if SMOKE:
        class prop:  # noqa: N801 -- stands in for the device properties
            name = "CPU smoke run (not a measurement)"
    else:
        prop = torch.cuda.get_device_properties(0)
    l2 = int(getattr(prop, "L2_cache_size", 0) or 60 * 1024 * 1024)
    bw, bw_bytes = copy_bandwidth()
    print(f"[peers] {prop.name}, L2 {l2 >> 20} MiB, copy bandwidth {bw / 1e12:.3f} TB/s", file=sys.stderr)
    timer = Timer(args.calls, args.replays, l2, warm_ms=args.warm_ms, sequential=args.sequential)

    have_normkit, normkit_note = False, ""
    try:
        import normkit  # noqa: F401
        have_normkit = SMOKE or bool(normkit.cuda_available())  # smoke: normkit's CPU path
        if not have_normkit:
            normkit_note = "normkit imported but sees no CUDA device (CPU-only build?)"
    except Exception as e:  # noqa: BLE001
        normkit_note = f"import normkit failed: {type(e).__name__}: {e}"
    if normkit_note:
        print(f"[peers] {normkit_note}", file=sys.stderr)

    cases = build_cases(args.suite.split(","))
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c["name"] in wanted]
    if args.part:
        k, n = args.part
        cases = cases[k - 1::n]  # every n-th case: each part gets its share of the small and the wide ones
    if SMOKE:
        cases = [smoke_case(c) for c in cases]
    meta = dict(tool="bench/peers.py", commit=args.commit or git_commit(), gpu=prop.name, l2_bytes=l2,
                torch=torch.__version__, alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                copy_bandwidth_GBps=bw / 1e9, copy_bytes=bw_bytes, outputs_kept=True,  # (RecentOutputs)
                calls_per_graph=args.calls, replays=args.replays, warm_ms=args.warm_ms, side_by_side=not args.sequential,
                compile=not args.quick,
                normkit=have_normkit, normkit_note=normkit_note, smoke=SMOKE, time_budget=args.time_budget,
                # the planner's thresholds: the file NORMKIT_PLANNER_TABLE names, or the GPU's built-in table
                planner_table=planner_table_source(have_normkit))
    use_compile = not args.quick
    compile_spent = 0.0
    results, notes_all = [], set()
    skipped = []
    for idx, case in enumerate(cases):
        if args.time_budget and time.time() - t_start > args.time_budget:
            skipped = [c["name"] for c in cases[idx:]]
            print(f"[peers] time budget of {args.time_budget:g} s spent: {len(skipped)} cases not run", file=sys.stderr)
            break
        m, n, dt = case["M"], case["N"], DTYPES[case["dtype"]]
        e = torch.empty((), dtype=dt).element_size()
        input_bytes = 2 * m * n * e
        nsets = timer.sets_for(input_bytes)
        peers, notes = optional_peers(case["family"], n, args.liger_path)
        notes_all.update(notes)
        # Memory: the sets (x, dy and the outputs' worth), each autograd peer's y per set (its full backward
        # is timed beside the others'), one call's outputs in each graph's pool, and the outputs each graph
        # keeps apart (RecentOutputs: under 2 x 3x L2 a graph, an op having at most 6 graphs: eager, compile, Liger,
        # Apex, Quack, normkit).
        free = 1 << 34 if SMOKE else torch.cuda.mem_get_info()[0]
        kept = 6 * 2 * timer.l2_factor * timer.l2_bytes
        while nsets > 1 and (nsets * (3 + len(peers)) + 6) * m * n * e + kept > 0.5 * free:
            nsets -= 1
        mem = "" if SMOKE else (f" GPU memory: {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated, "
                                f"{torch.cuda.memory_reserved() / 2**30:.1f} reserved, {free / 2**30:.1f} free{held_memory()}")
        print(f"[peers] {idx + 1}/{len(cases)} {case['name']} M={m} N={n} {case['dtype']} sets={nsets} "
              f"elapsed {time.time() - t_start:.0f}s{mem}", file=sys.stderr)
        sets = make_sets(case, nsets)
        row = dict(case, sets=nsets, times={}, errors={})

        def time_side_by_side(entries):
            """entries: [(key, fn, prepare or None)] of one op, timed side by side (Timer.side_by_side)."""
            named = []
            for key, fn, prepare in entries:
                try:
                    if prepare is not None:
                        for s in sets:
                            prepare(s, case["family"])
                    named.append((key, (lambda f: lambda i: f(sets[i]))(fn)))
                except Exception as ex:  # noqa: BLE001
                    row["errors"][key] = error_text(ex)
                    sync()
            before = len(timer.one_at_a_time_keys)
            times, errors = timer.side_by_side(named, nsets)
            row["times"].update({k: us for k, (us, _calls) in times.items()})
            row["errors"].update(errors)
            if len(timer.one_at_a_time_keys) > before:  # the graphs did not fit side by side
                row.setdefault("one_at_a_time", []).append(named[0][0].rsplit("_", 1)[-1])
            release_memory()  # this op's graphs are gone: their pools back before the next op's

        fwd_ops, gb_ops, full_ops = [], [], []
        fwd, gb, full = eager_ops(case["family"], n)
        fwd_ops.append(("eager_fwd", fwd, None))
        gb_ops.append(("eager_gb", gb, None))
        full_ops.append(("eager_full", full, None))
        if use_compile and compile_spent < args.compile_budget:
            # Compiled here, on one call each, so that the compile budget counts compiling alone.
            t0 = time.time()
            cfwd, cfull = compiled_ops(case["family"], n)
            for key, fn, ops in (("compile_fwd", cfwd, fwd_ops), ("compile_full", cfull, full_ops)):
                try:
                    fn(sets[0])
                    sync()
                    ops.append((key, fn, None))
                except Exception as ex:  # noqa: BLE001
                    row["errors"][key] = error_text(ex)
                    sync()
            compile_spent += time.time() - t0
        elif use_compile:
            row["errors"]["compile"] = f"skipped: compile budget of {args.compile_budget:.0f} s spent"
        for pname, (prepare, pfwd, pfull) in peers.items():
            fwd_ops.append((f"{pname}_fwd", pfwd, None))
            full_ops.append((f"{pname}_full", pfull, prepare))
        if have_normkit:
            nfwd, ngb, nfull = normkit_ops(case["family"], n)
            fwd_ops.append(("normkit_fwd", nfwd, None))
            gb_ops.append(("normkit_gb", ngb, None))
            full_ops.append(("normkit_full", nfull, None))
        for ops in (fwd_ops, gb_ops, full_ops):
            time_side_by_side(ops)
        drop_autograd_outputs(sets)
        if have_normkit:
            try:
                row["normkit_plan_gb"] = torch.ops.normkit.plan_backward(
                    "layer_norm" if case["family"] == "ln" else "rms_norm", m, n, dt,
                    [False, True, case["family"] == "ln"], "auto", None)
                row["normkit_plan_full"] = torch.ops.normkit.plan_backward(
                    "layer_norm" if case["family"] == "ln" else "rms_norm", m, n, dt,
                    [True, True, case["family"] == "ln"], "auto", None)
            except Exception as ex:  # noqa: BLE001
                row["errors"]["normkit_plan"] = str(ex)[:200]
        ew = e
        row["floor_us"] = {op: floor_bytes(op, case["family"], m, n, e, ew) / bw * 1e6 for op in ("fwd", "gb", "full")}
        results.append(row)
        del sets
        if not SMOKE:
            torch.cuda.empty_cache()
        for k, v in row["errors"].items():
            print(f"[peers]   {k}: {v}", file=sys.stderr)
        write_tables(args, meta, results, [], t_start, compile_spent, notes_all)
    write_tables(args, meta, results, skipped, t_start, compile_spent, notes_all, final=True)
    return 0


def write_outputs(args, meta, results):
    """The markdown table (--out) and the JSON beside it (--json); returns the markdown and the JSON's path."""
    md = render(meta, results)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(md)
    json_path = args.json or os.path.splitext(args.out)[0] + ".json"
    with open(json_path, "w") as f:
        json.dump(dict(meta=meta, results=results), f, indent=1)
    return md, json_path


def write_tables(args, meta, results, skipped, t_start, compile_spent, notes, final=False):
    meta = dict(meta, date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                compile_seconds=round(compile_spent, 1), optional_peer_notes=sorted(notes),
                seconds=round(time.time() - t_start, 1), not_run=skipped, complete=final)
    md, json_path = write_outputs(args, meta, results)
    if final:
        print(md)
        print(f"[peers] wrote {args.out} and {json_path} in {time.time() - t_start:.0f} s", file=sys.stderr)


def merge(args):
    """One table from the JSONs of a run split over several processes (device calls, --part): their results
    in the suites' order, a case measured twice kept from the later file. The runs must share commit, GPU and
    timing options; each keeps its own floors (its copy bandwidth), and the header lists the runs."""
    metas, results, source = [], {}, {}
    for i, path in enumerate(args.merge):
        with open(path) as f:
            data = json.load(f)
        metas.append(data["meta"])
        for r in data["results"]:
            results.pop(r["name"], None)
            results[r["name"]], source[r["name"]] = r, i
    same = ("commit", "gpu", "torch", "calls_per_graph", "replays", "warm_ms", "side_by_side", "compile", "normkit",
            "planner_table", "smoke")
    for path, m in zip(args.merge[1:], metas[1:]):
        differ = [k for k in same if m.get(k) != metas[0].get(k)]
        if differ:
            raise SystemExit(f"peers.py --merge: {path}: {', '.join(differ)} differ from {args.merge[0]}")
    runs = [dict(date=m.get("date"), seconds=m.get("seconds"), copy_bandwidth_GBps=m["copy_bandwidth_GBps"],
                 compile_seconds=m.get("compile_seconds", 0), cases=sum(1 for v in source.values() if v == i))
            for i, m in enumerate(metas)]
    meta = dict(metas[-1], runs=runs,
                compile_seconds=round(sum(r["compile_seconds"] for r in runs), 1),
                optional_peer_notes=sorted({n for m in metas for n in m.get("optional_peer_notes", [])}),
                seconds=round(sum(r["seconds"] or 0 for r in runs), 1),
                not_run=[n for n in dict.fromkeys(c for m in metas for c in m.get("not_run", [])) if n not in results],
                complete=True)
    # the suites' order (parts of --part take every n-th case), cases of no suite after them
    order = {c["name"]: i for i, c in enumerate(build_cases(["seed", "llm"]))}
    merged = sorted(results.values(), key=lambda r: order.get(r["name"], len(order)))
    md, _json_path = write_outputs(args, meta, merged)
    print(md)
    return 0


def planner_table_source(have_normkit):
    """The planner table normkit's plans come from (normkit.planner_table(): the file NORMKIT_PLANNER_TABLE
    names, or "built-in (H200)" / "built-in (H100 SXM)"); without normkit, the variable or "built-in"."""
    if have_normkit:
        import normkit
        if hasattr(normkit, "planner_table"):  # an install older than the H100 SXM's table lacks it
            return normkit.planner_table()
    return os.environ.get("NORMKIT_PLANNER_TABLE") or "built-in"


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def render(meta, results):
    def f(v):
        return "-" if v is None else f"{v:.2f}"

    out = ["# normkit vs peers (CUDA-graph kernel time, µs)", ""]
    if meta.get("smoke"):
        out += ["> **CPU smoke run**: tiny shapes on the CPU, wall-clock timing. It checks bench/peers.py; "
                "it measures nothing.", ""]
    if not meta.get("complete", True):
        out += ["> **Partial**: written after the last finished case; the run did not end (yet).", ""]
    out += [
           f"- commit: {meta['commit']}", f"- date: {meta['date']}", f"- GPU: {meta['gpu']} (L2 {meta['l2_bytes'] >> 20} MiB)",
           f"- torch {meta['torch']}; torch.compile: {'yes' if meta['compile'] else 'no (--quick)'}"
           + (f" ({meta['compile_seconds']} s compiling)" if meta["compile"] else "")
           + (f"; PYTORCH_CUDA_ALLOC_CONF={meta['alloc_conf']}" if meta.get("alloc_conf") else ""),
           f"- mode: graph replay — {meta['calls_per_graph']} calls captured per graph (rounded up to whole input "
           f"rotations), median of {meta['replays']} replays after {meta.get('warm_ms', 0):g} ms of untimed ones; inputs "
           f"rotate over buffer sets until > 3x L2"
           + ("; each call's outputs kept until > 3x L2 of later ones (RecentOutputs)" if meta.get("outputs_kept") else "")
           + ("; the peers of an op timed side by side (one replay of each in turn)" if meta.get("side_by_side") else ""),
           f"- copy bandwidth: {meta['copy_bandwidth_GBps'] / 1000:.3f} TB/s (torch copy_ of "
           f"{meta['copy_bytes'] / 1e9:.2f} GB, read + write, best of 10)",
           f"- normkit: {'torch.ops.normkit (strategy auto)' if meta['normkit'] else 'not measured: ' + meta['normkit_note']}"
           + f"; planner table: {meta.get('planner_table', 'built-in')}",
           ]
    for i, r in enumerate(meta.get("runs", [])):
        out.append(f"- run {i + 1} of {len(meta['runs'])} (merged): {r['date']}, {r['cases']} cases, copy bandwidth "
                   f"{r['copy_bandwidth_GBps'] / 1000:.3f} TB/s (its cases' floors), {r['compile_seconds']} s compiling")
    if meta["optional_peer_notes"]:
        out.append("- optional peers not available: " + "; ".join(sorted({n.split(':')[0] for n in meta['optional_peer_notes']})))
    out.append("")
    peer_names = ["eager", "compile", "liger", "apex", "quack"]
    for op, title in (("gb", "dgamma/dbeta only (the seed's op)"), ("full", "full backward (dX + dgamma [+ dbeta])"),
                      ("fwd", "forward")):
        cols = [p for p in peer_names if any(f"{p}_{op}" in r["times"] for r in results)]
        out += [f"## {title}", "",
                "| case | M | N | dtype | " + " | ".join(cols) + " | normkit | normkit plan | normkit / best peer "
                "| floor | best peer % of floor | normkit % of floor |",
                "|---|---|---|---|" + "---|" * len(cols) + "---|---|---|---|---|---|"]
        for r in results:
            t = r["times"]
            peer_t = {p: t.get(f"{p}_{op}") for p in cols}
            best = min([v for v in peer_t.values() if v is not None], default=None)
            nk = t.get(f"normkit_{op}")
            floor = r["floor_us"][op]
            ratio = f"{nk / best:.2f}×" if nk is not None and best else "-"
            plan = r.get("normkit_plan_gb" if op == "gb" else "normkit_plan_full", "-") if op != "fwd" else "-"
            out.append(f"| {r['name']} | {r['M']} | {r['N']} | {r['dtype']} | "
                       + " | ".join(f(peer_t[p]) for p in cols)
                       + f" | {f(nk)} | {plan} | {ratio} | {floor:.2f} | "
                       + (f"{100 * floor / best:.0f}%" if best else "-") + " | "
                       + (f"{100 * floor / nk:.0f}%" if nk else "-") + " |")
        out.append("")
    out.append("normkit / best peer < 1 means normkit is faster. floor = bytes that must move / copy bandwidth.")
    if meta.get("not_run"):
        out += ["", f"### Not run (time budget of {meta['time_budget']:g} s spent)", "",
                ", ".join(meta["not_run"])]
    alone = [f"{r['name']} ({', '.join(r['one_at_a_time'])})" for r in results if r.get("one_at_a_time")]
    if alone:
        out += ["", "### Timed one peer at a time (their graphs did not fit side by side, or a capture failed "
                "beside the others)", "", ", ".join(alone)]
    errs = [(r["name"], k, v) for r in results for k, v in r["errors"].items()]
    if errs:
        out += ["", "### Not measured", ""] + [f"- {n}: {k}: {v}" for n, k, v in errs]
    return "\n".join(out) + "\n"


def part_spec(text):
    """'K/N' -> (K, N) with 1 <= K <= N."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--part {text!r}: expected K/N, e.g. 1/2") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--part {text!r}: K must be 1..N")
    return k, n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/h200-peers.md")
    ap.add_argument("--json", default=None, help="default: --out with .json")
    ap.add_argument("--suite", default="seed,llm", help="comma list of seed, llm")
    ap.add_argument("--cases", default=None, help="only these case names (comma list)")
    ap.add_argument("--quick", action="store_true", help="drop torch.compile")
    ap.add_argument("--compile-budget", type=float, default=120.0,
                    help="seconds of torch.compile work (compiling) before compiled peers are skipped")
    ap.add_argument("--liger-path", default=None, help="directory to put on sys.path for liger_kernel")
    ap.add_argument("--calls", type=int, default=20, help="calls captured per graph")
    ap.add_argument("--replays", type=int, default=5, help="timed replays (median)")
    ap.add_argument("--warm-ms", type=float, default=25.0,
                    help="untimed replays of an op's graphs in turn for at least this long before the timed ones")
    ap.add_argument("--sequential", action="store_true",
                    help="time each peer whole, one after another, instead of side by side (as before NOTES entry 96)")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--time-budget", type=float, default=0.0,
                    help="seconds after which no new case starts (0: none); the rest are listed as not run")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="check this script on the CPU: tiny shapes, wall-clock timing, no measurement")
    ap.add_argument("--part", type=part_spec, default=None, metavar="K/N",
                    help="only part K of N: every N-th case from the K-th (after --cases); --merge joins the parts")
    ap.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                    help="write one table (--out, --json) from the JSONs of a run split over several processes; "
                         "runs nothing")
    args = ap.parse_args()
    if args.merge:
        return merge(args)
    if args.cpu_smoke:
        global SMOKE, DEVICE
        SMOKE, DEVICE = True, "cpu"
        return run(args)
    if not torch.cuda.is_available():
        print("peers.py: no CUDA device: nothing to compare (every peer here is a GPU kernel)", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
