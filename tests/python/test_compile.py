"""normkit under torch.compile(fullgraph=True) and inside a captured CUDA graph."""
import copy
import math

import pytest

torch = pytest.importorskip("torch")

from nk_testutil import assert_close, device, import_normkit  # noqa: E402

normkit = import_normkit()

DEV = device()
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class TinyTransformerBlock(torch.nn.Module):
    """Pre-norm attention + MLP, LayerNorm on the attention branch, RMSNorm on the MLP branch and
    a final LayerNorm over a multi-dim normalized shape."""

    def __init__(self, d=64, heads=4, vocab=97):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.ln1 = normkit.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.rms = normkit.nn.RMSNorm(d, eps=1e-6)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)
        self.ln_f = normkit.nn.LayerNorm((heads, d // heads))
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens):
        b, t = tokens.shape
        h = self.emb(tokens)
        q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        h = h + self.fc2(torch.nn.functional.gelu(self.fc1(self.rms(h))))
        h = self.ln_f(h.view(b, t, self.heads, -1)).view(b, t, -1)
        return self.head(h)


def _train(model, step_fn, data, steps=10):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for i in range(steps):
        tokens, targets = data[i]
        opt.zero_grad(set_to_none=True)
        loss = step_fn(tokens, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_transformer_block_trains_identically_under_torch_compile():
    torch.manual_seed(0)
    model = TinyTransformerBlock().to(DEV)
    compiled_model = copy.deepcopy(model)
    g = torch.Generator(device=DEV).manual_seed(1)
    data = [(torch.randint(0, 97, (4, 24), generator=g, device=DEV),
             torch.randint(0, 97, (4, 24), generator=g, device=DEV)) for _ in range(10)]

    def loss_of(m):
        return lambda tokens, targets: torch.nn.functional.cross_entropy(m(tokens).flatten(0, 1), targets.flatten())

    eager = _train(model, loss_of(model), data)
    torch._dynamo.reset()
    # inductor on CUDA; on the CPU aot_eager still traces the ops' fake kernels and autograd
    backend = "inductor" if DEV == "cuda" else "aot_eager"
    step = torch.compile(loss_of(compiled_model), fullgraph=True, backend=backend)
    compiled = _train(compiled_model, step, data)
    assert all(math.isfinite(v) for v in compiled)
    assert compiled[-1] < compiled[0]  # it trains
    # inductor fuses and reorders the surrounding float32 ops (not normkit's), so the two runs
    # differ by float32 rounding that AdamW carries along; a wrong gradient would differ by far more
    for i, (a, b) in enumerate(zip(eager, compiled)):
        assert abs(a - b) <= 1e-3 * abs(a), f"step {i}: eager loss {a} vs compiled {b} (all: {eager} vs {compiled})"
    for (n, p), (_, q) in zip(model.named_parameters(), compiled_model.named_parameters()):
        assert_close(n, q, p, 1e-3)


def test_compiled_graph_calls_normkit_ops():
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.testing import CompileCounterWithBackend
    from functorch.compile import make_boxed_func

    counter = CompileCounterWithBackend("aot_eager")
    ln = normkit.nn.LayerNorm(32).to(DEV)
    x = torch.randn(4, 32, device=DEV, requires_grad=True)
    fn = torch.compile(lambda t: ln(t).sum(), fullgraph=True, backend=counter)
    fn(x).backward()
    assert counter.frame_count == 1
    graph_ops = {str(n.target) for gm in counter.graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert any("normkit.layer_norm_forward" in o for o in graph_ops), graph_ops
    # AOTAutograd's forward and backward graphs: normkit's forward ops, and its backward ops in the
    # backward (not a recomputation: autograd.cpp recomputes only for create_graph backwards)
    graphs = {}

    def keep(name):
        def compiler(gm, _):
            graphs[name] = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
            return make_boxed_func(gm)
        return compiler

    rms = normkit.nn.RMSNorm(32).to(DEV)
    torch._dynamo.reset()
    step = torch.compile(lambda t: rms(ln(t)).sum(), fullgraph=True,
                         backend=aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward")))
    step(x).backward()
    assert {"normkit.layer_norm_forward.default", "normkit.rms_norm_forward.default"} <= graphs["forward"], graphs
    assert {"normkit.layer_norm_backward.default", "normkit.rms_norm_backward.default"} <= graphs["backward"], graphs


def test_eager_forward_with_compiled_autograd_backward():
    """An eager forward whose backward runs under compiled autograd (torch.compile of the backward graph
    alone, as when only part of a model is compiled): normkit's autograd nodes must take that path and
    give the eager gradients (they failed an internal assert of CppNode while the Functions marked their
    statistics non-differentiable)."""
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), normkit.nn.LayerNorm(32), torch.nn.GELU(),
                                normkit.nn.RMSNorm(32), torch.nn.Linear(32, 4)).to(DEV)
    x = torch.randn(8, 16, device=DEV)
    model(x).square().sum().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    loss = model(x).square().sum()
    # (normkit's C++ nodes run eagerly inside the compiled backward graph: a graph break, not an error)
    with compiled_autograd._enable(torch.compile(backend="aot_eager")):
        loss.backward()
    for (name, p), g in zip(model.named_parameters(), eager):
        assert_close(name, p.grad, g, 1e-5)


@needs_cuda
def test_cuda_graph_capture_and_replay():
    torch.manual_seed(0)
    dtype = torch.bfloat16
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), normkit.nn.LayerNorm(1024),
                                torch.nn.Linear(1024, 512), normkit.nn.RMSNorm(512)).cuda().to(dtype)
    static_x = torch.randn(2048, 256, device="cuda", dtype=dtype)
    static_dy = torch.randn(2048, 512, device="cuda", dtype=dtype)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(static_x).backward(static_dy)
    torch.cuda.current_stream().wait_stream(s)

    graph = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_y = model(static_x)
        static_y.backward(static_dy)

    for seed in (1, 2):
        g = torch.Generator(device="cuda").manual_seed(seed)
        static_x.copy_(torch.randn(2048, 256, device="cuda", generator=g).to(dtype))
        static_dy.copy_(torch.randn(2048, 512, device="cuda", generator=g).to(dtype))
        graph.replay()
        replayed = {n: p.grad.clone() for n, p in model.named_parameters()}
        y_replayed = static_y.clone()
        # eager on the same inputs
        eager_model = copy.deepcopy(model)
        eager_model.zero_grad(set_to_none=True)
        y = eager_model(static_x.clone())
        y.backward(static_dy.clone())
        assert_close("y", y_replayed, y, 1e-3)
        for n, p in eager_model.named_parameters():
            assert_close(f"{n}.grad (seed {seed})", replayed[n], p.grad, 1e-3)


class _NormStack(torch.nn.Module):
    """Every module form: LayerNorm affine, without affine over a 2-dim shape, without bias; RMSNorm with
    a weight and eps=None, and without weight."""

    def __init__(self, d=16):
        super().__init__()
        self.ln = normkit.nn.LayerNorm(d)
        self.ln_2d = normkit.nn.LayerNorm((4, d // 4), elementwise_affine=False)
        self.ln_nobias = normkit.nn.LayerNorm(d, bias=False)
        self.rms = normkit.nn.RMSNorm(d)
        self.rms_plain = normkit.nn.RMSNorm([d], eps=1e-3, elementwise_affine=False)

    def forward(self, x):
        y = self.ln(x)
        y = self.ln_2d(y.unflatten(-1, (4, -1))).flatten(-2)
        return self.rms_plain(self.rms(self.ln_nobias(y)))


def _norm_stack():
    torch.manual_seed(0)
    model = _NormStack().to(DEV)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()  # not the ones and zeros a fresh module starts with
    return model


def _normkit_calls(names):
    return sorted(n for n in names if "normkit" in n)


def test_torch_export_keeps_normkit_ops_and_round_trips():
    """torch.export (the path to AOTInductor and serving): the exported graph calls normkit's ops, with a
    dynamic batch dimension through their fake kernels, and survives save / load."""
    import io
    model = _norm_stack()
    x = torch.randn(6, 16, device=DEV)
    batch = torch.export.Dim("batch")
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    calls = _normkit_calls(str(n.target) for n in ep.graph.nodes if n.op == "call_function")
    assert calls == ["normkit.layer_norm_forward.default"] * 3 + ["normkit.rms_norm_forward.default"] * 2, calls
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    for rows in (6, 11):  # the traced batch and another
        x = torch.randn(rows, 16, device=DEV)
        with torch.no_grad():
            expect = model(x)
        assert_close(f"exported, {rows} rows", ep.module()(x), expect, 0)
        assert_close(f"loaded, {rows} rows", loaded.module()(x), expect, 0)


def test_aot_inductor_package_runs_normkit_ops(tmp_path):
    """AOTInductor (serving without Python's tracing): the exported graph compiled to a package calls
    normkit's ops through its proxy executor, with a dynamic batch."""
    model = _norm_stack().eval()
    batch = torch.export.Dim("batch")
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(6, 16, device=DEV),), dynamic_shapes=({0: batch},))
        path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "norms.pt2"))
        runner = torch._inductor.aoti_load_package(path)
        for rows in (6, 13):
            x = torch.randn(rows, 16, device=DEV)
            assert_close(f"AOTInductor, {rows} rows", runner(x), model(x), 1e-6)


def test_torchscript_script_and_trace_run_normkit_ops():
    """torch.jit.script of the modules (deprecated by PyTorch, still in serving stacks: torch.nn.LayerNorm
    scripts, so its drop-in must) compiles their forward to the ops; the scripted module gives eager's
    outputs and gradients, and so after torch.jit.save / load. torch.jit.trace records the ops too."""
    import io
    import warnings
    model = _norm_stack()
    x = torch.randn(5, 16, device=DEV, requires_grad=True)
    y = model(x)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.* warn that they are deprecated
        scripted = torch.jit.script(model)
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
        buffer.seek(0)
        loaded = torch.jit.load(buffer)
        traced = torch.jit.trace(model, (x,))
    code = "".join(getattr(scripted, name).code for name in ("ln", "ln_2d", "ln_nobias", "rms", "rms_plain"))
    assert code.count("ops.normkit.layer_norm_forward") == 3 and code.count("ops.normkit.rms_norm_forward") == 2, code
    for name, module in (("scripted", scripted), ("loaded", loaded), ("traced", traced)):
        out = module(x)
        assert_close(f"{name} y", out, y, 0)
        (g,) = torch.autograd.grad(out.square().sum(), x)
        assert_close(f"{name} dx", g, gx, 0)
    kinds = _normkit_calls(n.kind() for n in traced.inlined_graph.nodes())
    assert kinds == ["normkit::layer_norm_forward"] * 3 + ["normkit::rms_norm_forward"] * 2, kinds
