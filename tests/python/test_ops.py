"""torch.ops.normkit.*: opcheck (schema, fake kernels, autograd registration, AOT dispatch),
gradcheck in float64, forced strategies, error messages, empty and meta tensors."""
import math

import threading

import pytest

torch = pytest.importorskip("torch")

from nk_testutil import TOL, assert_close, device, make_inputs, reference, import_normkit  # noqa: E402

normkit = import_normkit()

DEV = device()
ops = torch.ops.normkit
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# (x shape, normalized_shape)
SHAPES = [((16, 64), (64,)), ((3, 5, 40), (40,)), ((2, 3, 4, 8), (4, 8)), ((1, 1), (1,))]
DTYPES = [torch.float32, torch.float64] + ([torch.float16, torch.bfloat16] if DEV == "cuda" else [torch.bfloat16])
LN_MASKS = [[True, True, True], [False, True, True], [True, False, True], [True, True, False], [False, False, True]]


def _opcheck(op, args):
    result = torch.library.opcheck(op, args)
    bad = {k: v for k, v in result.items() if v != "SUCCESS"}
    assert not bad, bad


@pytest.mark.parametrize("shape,ns", SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_opcheck_layer_norm(shape, ns):
    for dtype in DTYPES:
        for affine, bias in ((True, True), (True, False), (False, False)):
            x, dy, w, b = make_inputs(shape, ns, dtype, DEV, affine=affine, bias=bias)
            # forward with inputs that require grad: also exercises the autograd formula
            args = (x.requires_grad_(), list(ns), w.requires_grad_() if w is not None else None,
                    b.requires_grad_() if b is not None else None, 1e-5)
            _opcheck(ops.layer_norm_forward.default, args)
            x = x.detach()
            w = w.detach() if w is not None else None
            b = b.detach() if b is not None else None
            _, mean, rstd = ops.layer_norm_forward(x, list(ns), w, b, 1e-5)
            for mask in LN_MASKS:
                _opcheck(ops.layer_norm_backward.default, (dy, x, list(ns), mean, rstd, w, b, mask, "auto"))
            # weight undefined but bias defined: dbias only (the huge-M bug's configuration)
            b2 = make_inputs(shape, ns, dtype, DEV)[3]
            _, mean, rstd = ops.layer_norm_forward(x, list(ns), None, b2, 1e-5)
            _opcheck(ops.layer_norm_backward.default, (dy, x, list(ns), mean, rstd, None, b2, [True, True, True]))


@pytest.mark.parametrize("shape,ns", SHAPES, ids=lambda v: "x".join(map(str, v)))
def test_opcheck_rms_norm(shape, ns):
    for dtype in DTYPES:
        for affine in (True, False):
            x, dy, w, _ = make_inputs(shape, ns, dtype, DEV, affine=affine)
            for eps in (None, 1e-6):
                _opcheck(ops.rms_norm_forward.default,
                         (x.requires_grad_(), list(ns), w.requires_grad_() if w is not None else None, eps))
            x = x.detach()
            w = w.detach() if w is not None else None
            _, rstd = ops.rms_norm_forward(x, list(ns), w, None)
            for mask in ([True, True], [True, False], [False, True]):
                _opcheck(ops.rms_norm_backward.default, (dy, x, list(ns), rstd, w, mask, "auto"))


def _gradcheck_device(dev):
    g = torch.Generator().manual_seed(0)

    def mk(*shape):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) + 0.3).to(dev).requires_grad_()

    for shape, ns in (((5, 12), (12,)), ((2, 3, 2, 5), (2, 5))):
        x, w, b = mk(*shape), mk(*ns), mk(*ns)
        assert torch.autograd.gradcheck(lambda x, w, b: normkit.layer_norm(x, ns, w, b, 1e-5), (x, w, b))
        assert torch.autograd.gradcheck(lambda x, b: normkit.layer_norm(x, ns, None, b, 1e-5), (x, b))
        assert torch.autograd.gradcheck(lambda x: normkit.layer_norm(x, ns, None, None, 1e-5), (x,))
        assert torch.autograd.gradcheck(lambda x, w: normkit.rms_norm(x, ns, w, 1e-6), (x, w))
        assert torch.autograd.gradcheck(lambda x: normkit.rms_norm(x, ns), (x,))


def test_gradcheck_fp64_cpu():
    _gradcheck_device("cpu")


@needs_cuda
def test_gradcheck_fp64_cuda():
    _gradcheck_device("cuda")


def test_double_backward_gradgradcheck():
    """create_graph backwards recompute the forward with differentiable ATen ops: second derivatives
    (with respect to x, weight, bias and the incoming gradient) pass gradgradcheck in float64, with and
    without weight / bias and over a multi-dim normalized shape."""
    g = torch.Generator().manual_seed(3)

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(DEV).requires_grad_()

    x, w, b, w2 = leaf(3, 2, 6), leaf(6), leaf(6), leaf(2, 6)
    cases = [(lambda x, w, b: normkit.layer_norm(x, (6,), w, b, 1e-3), (x, w, b)),
             (lambda x: normkit.layer_norm(x, (6,), eps=1e-3), (x,)),
             (lambda x, w: normkit.layer_norm(x, (2, 6), w, None, 1e-3), (x, w2)),
             (lambda x, w: normkit.rms_norm(x, (6,), w, 1e-3), (x, w)),
             (lambda x: normkit.rms_norm(x, (2, 6)), (x,))]
    for fn, inputs in cases:
        assert torch.autograd.gradgradcheck(fn, inputs)


def test_gradient_penalty_matches_torch():
    """A WGAN-GP style penalty on the gradient with respect to the input, trained through normkit's norms,
    gives the gradients torch's norms give (float32, a 16-bit input with float32 weights as well)."""
    for dtype, wdtype, tol in ((torch.float32, torch.float32, 1e-5), (torch.bfloat16, torch.float32, 2e-2)):
        grads = []
        for norms in ((normkit.layer_norm, normkit.rms_norm),
                      (torch.nn.functional.layer_norm, torch.nn.functional.rms_norm)):
            g = torch.Generator().manual_seed(5)
            x = torch.randn(8, 32, generator=g).to(DEV, dtype).requires_grad_()
            w, b, v = (torch.randn(32, generator=g).to(DEV, wdtype).requires_grad_() for _ in range(3))
            ln, rms = norms
            cast = (lambda t: t) if norms[0] is normkit.layer_norm else (lambda t: t.to(dtype))
            out = rms(torch.tanh(ln(x, (32,), cast(w), cast(b), 1e-5)), (32,), cast(v), 1e-6).float().sum()
            (gx,) = torch.autograd.grad(out, x, create_graph=True)
            penalty = (gx.float().norm(dim=1) - 1).square().mean()
            penalty.backward()
            grads.append([t.grad.float() for t in (x, w, b, v)])
        for name, ours, theirs in zip(("x", "weight", "bias", "rms weight"), *grads):
            assert_close(f"{dtype} {name}", ours, theirs, tol)


def _composite_norm(rms, x, shape, w, b, eps):
    """The norm written with differentiable ATen ops: the reference for derivatives beyond first order."""
    axes = tuple(range(x.dim() - len(shape), x.dim()))
    c = x if rms else x - x.mean(axes, keepdim=True)
    y = c * torch.rsqrt(c.square().mean(axes, keepdim=True) + eps)
    y = y * w if w is not None else y
    return y + b if b is not None else y


def test_forward_mode_ad():
    """torch.autograd.forward_ad: JVPs through normkit's norms match torch's (tangents on x, weight, bias,
    with and without a graph being recorded), a gradient of a JVP (reverse-over-forward) matches the
    composite norm's, and forward mode over the backward raises instead of dropping the tangent."""
    import torch.autograd.forward_ad as fwAD

    g = torch.Generator().manual_seed(11)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(DEV)

    x, w, b, tx, tw, tb, v = rand(3, 2, 8), rand(8), rand(8), rand(3, 2, 8), rand(8), rand(8), rand(3, 2, 8)
    F = torch.nn.functional
    norms = {"ln": (lambda x, w, b: normkit.layer_norm(x, (8,), w, b, 1e-3),
                    lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-3)),
             "rms": (lambda x, w, b: normkit.rms_norm(x, (8,), w, 1e-3),
                     lambda x, w, b: F.rms_norm(x, (8,), w, 1e-3))}
    for name, (ours, theirs) in norms.items():
        for tangents in ((tx, None, None), (None, tw, None), (tx, tw, tb)):
            for record in (False, True):
                got = []
                for f in (ours, theirs):
                    with fwAD.dual_level():
                        args = [fwAD.make_dual(p.clone().requires_grad_(record), t) if t is not None else p
                                for p, t in zip((x, w, b), tangents)]
                        got.append(fwAD.unpack_dual(f(*args)).tangent)
                assert got[1] is not None and got[0] is not None, (name, tangents)
                torch.testing.assert_close(got[0], got[1], rtol=1e-10, atol=1e-10)
        # reverse-over-forward, against the composite norm (torch 2.11's F.layer_norm differs from both there)
        grads = []
        for f in (ours, lambda x, w, b: _composite_norm(name == "rms", x, (8,), w, None if name == "rms" else b, 1e-3)):
            xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
            with fwAD.dual_level():
                t = fwAD.unpack_dual(f(fwAD.make_dual(xr, tx), fwAD.make_dual(wr, tw), b)).tangent
                grads.append(torch.autograd.grad((t * v).sum(), (xr, wr)))
        for a, c in zip(*grads):
            torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-10)
        # forward-over-reverse
        xr = x.clone().requires_grad_()
        with fwAD.dual_level(), pytest.raises(RuntimeError, match="forward-over-reverse"):
            torch.autograd.grad(ours(xr, w, b), xr, fwAD.make_dual(torch.ones_like(x), tx))


def test_backward_op_itself_has_no_derivative():
    x, dy, w, b = make_inputs((4, 16), (16,), torch.float64, DEV)
    x.requires_grad_()
    y, mean, rstd = ops.layer_norm_forward(x.detach(), [16], w, b, 1e-5)
    dx, _, _ = ops.layer_norm_backward(dy, x, [16], mean, rstd, w, b, [True, True, True])
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        dx.sum().backward()


def test_backward_runs_only_the_backward_op():
    """A forward + backward of normkit.layer_norm / rms_norm dispatches the forward op, the backward
    op and nothing else: no zero-filled gradients for the statistics outputs (mean, rstd), whose
    materialisation cost two extra fill kernels and ~56 us of host time per LayerNorm (H200 probe)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    for name, fn in (("layer_norm", lambda x, w, b: normkit.layer_norm(x, (16,), w, b)),
                     ("rms_norm", lambda x, w, b: normkit.rms_norm(x, (16,), w))):
        x, dy, w, b = make_inputs((4, 16), (16,), torch.float32, DEV)
        for t in (x, w, b):
            t.requires_grad_()
        y = fn(x, w, b)
        with Record() as record:
            y.backward(dy)
        # aten.detach: AccumulateGrad storing the new .grad (a view, no kernel)
        extra = [op for op in record.ops if not op.startswith(f"normkit.{name}_backward") and op != "aten.detach"]
        assert not extra, f"{name}: backward dispatched {extra} besides the backward op"
        assert x.grad is not None and w.grad is not None


def test_forward_without_grad_records_nothing_and_matches():
    """With nothing to differentiate (torch.no_grad, or no input requiring grad) the forward ops run
    below autograd without building a context: same bits as the recording path, no grad_fn. With
    only the weight requiring grad (frozen activations) the graph is still recorded."""
    x, dy, w, b = make_inputs((6, 40), (40,), torch.float32, DEV)
    for name, fn in (("layer_norm", lambda x, w, b: normkit.layer_norm(x, (40,), w, b)),
                     ("rms_norm", lambda x, w, b: normkit.rms_norm(x, (40,), w))):
        plain = fn(x, w, b)
        assert plain.grad_fn is None and not plain.requires_grad, name
        wg = w.clone().requires_grad_()
        recorded = fn(x, wg, b)
        assert recorded.grad_fn is not None, f"{name}: weight requires grad but no graph was recorded"
        assert torch.equal(plain, recorded.detach()), name
        with torch.no_grad():
            under_no_grad = fn(x, wg, b)
        assert under_no_grad.grad_fn is None and torch.equal(under_no_grad, plain), name
        recorded.backward(dy)
        assert wg.grad is not None and torch.isfinite(wg.grad).all(), name


def test_stats_shapes_and_dtypes():
    for dtype in DTYPES:
        x = torch.randn(2, 3, 4, 8, device=DEV).to(dtype)
        y, mean, rstd = ops.layer_norm_forward(x, [4, 8], None, None, 1e-5)
        stat = torch.float64 if dtype == torch.float64 else torch.float32
        assert y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
        assert mean.shape == (2, 3, 1, 1) and mean.dtype == stat and rstd.dtype == stat
        y, rstd = ops.rms_norm_forward(x, [8], None, None)
        assert rstd.shape == (2, 3, 4, 1) and rstd.dtype == stat


def test_rms_norm_eps_none_is_torchs():
    """eps=None is the epsilon of the type the row is computed in, as ATen resolves it: float32's for
    float16 / bfloat16 / float32 (not torch.finfo(x.dtype).eps, which F.rms_norm's docstring says and
    normkit used to take: bf16 rows of small magnitude then differed from torch.nn.RMSNorm by up to 89 %)."""
    for dtype in DTYPES:
        # a tiny-magnitude input makes eps matter
        x = (torch.randn(8, 32, device=DEV) * 1e-3).to(dtype)
        y, rstd = ops.rms_norm_forward(x, [32], None, None)
        eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
        ref = 1.0 / torch.sqrt(x.double().cpu().pow(2).mean(-1, keepdim=True) + eps)
        assert_close(f"rstd {dtype}", rstd, ref, 1e-5)
        # torch's own default is that number (the premise; a torch that changes it fails here)
        torch_y = torch.nn.functional.rms_norm(x, (32,))
        assert torch.equal(torch_y, torch.nn.functional.rms_norm(x, (32,), eps=eps)), dtype
        assert_close(f"y {dtype} against F.rms_norm(eps=None)", normkit.rms_norm(x, (32,)), torch_y, TOL[dtype])
        if dtype in (torch.float16, torch.bfloat16):
            wrong = 1.0 / torch.sqrt(x.double().cpu().pow(2).mean(-1, keepdim=True) + torch.finfo(dtype).eps)
            assert not torch.allclose(rstd.double().cpu(), wrong, rtol=1e-2)


def test_fp32_weight_with_half_activations():
    for dtype in (torch.float16, torch.bfloat16):
        x, dy, w, b = make_inputs((64, 256), (256,), dtype, DEV, weight_dtype=torch.float32)
        y, mean, rstd = ops.layer_norm_forward(x, [256], w, b, 1e-5)
        dx, dw, db = ops.layer_norm_backward(dy, x, [256], mean, rstd, w, b, [True, True, True])
        assert y.dtype == dtype and dx.dtype == dtype and dw.dtype == torch.float32 and db.dtype == torch.float32
        reference("ln", x, (256,), w, b, 1e-5, dy, {"y": y, "dx": dx, "dw": dw, "db": db}, TOL[dtype])


def test_empty_rows():
    for dtype in (torch.float32, torch.float64):
        x = torch.empty(0, 7, 16, device=DEV, dtype=dtype)
        w = torch.ones(16, device=DEV, dtype=dtype)
        y, mean, rstd = ops.layer_norm_forward(x, [16], w, w, 1e-5)
        assert y.shape == x.shape and mean.shape == (0, 7, 1)
        dx, dw, db = ops.layer_norm_backward(x, x, [16], mean, rstd, w, w, [True, True, True])
        assert dx.shape == x.shape and torch.equal(dw, torch.zeros_like(w)) and torch.equal(db, torch.zeros_like(w))
        y, rstd = ops.rms_norm_forward(x, [16], w, None)
        dx, dw = ops.rms_norm_backward(x, x, [16], rstd, w, [True, True])
        assert dx.shape == x.shape and torch.equal(dw, torch.zeros_like(w))


def test_empty_normalized_rows():
    """Rows of N = 0 elements (M > 0): PyTorch returns them (y empty, mean 0, rstd NaN: the statistics
    of 0 / 0) and their gradients are empty; normkit's ops and modules do the same on every device."""
    for shape, ns in (((3, 5, 0), (0,)), ((4, 2, 0), (2, 0))):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            x = torch.randn(shape, device=DEV, dtype=dtype)
            w = torch.randn(ns, device=DEV, dtype=dtype)
            y, mean, rstd = ops.layer_norm_forward(x, list(ns), w, w, 1e-5)
            t_y, t_mean, t_rstd = torch.native_layer_norm(x, list(ns), w, w, 1e-5)
            assert y.shape == t_y.shape and mean.shape == t_mean.shape and rstd.shape == t_rstd.shape
            stats_dtype = torch.float64 if dtype == torch.float64 else torch.float32  # ATen's on CUDA (its CPU: x's)
            assert mean.dtype == stats_dtype and rstd.dtype == stats_dtype
            assert torch.equal(mean, torch.zeros_like(mean)) and bool(rstd.isnan().all())
            if DEV == "cpu":
                assert torch.equal(mean, t_mean) and bool(t_rstd.isnan().all())
            dx, dw, db = ops.layer_norm_backward(x, x, list(ns), mean, rstd, w, w, [True, True, True])
            assert dx.shape == x.shape and dw.shape == w.shape and db.shape == w.shape
            y, rstd = ops.rms_norm_forward(x, list(ns), w, None)
            assert y.shape == x.shape and rstd.shape == mean.shape and bool(rstd.isnan().all())
            dx, dw = ops.rms_norm_backward(x, x, list(ns), rstd, w, [True, True])
            assert dx.shape == x.shape and dw.shape == w.shape
        # through autograd and the modules, as torch.nn's
        for ours, theirs in ((normkit.nn.LayerNorm(ns, device=DEV), torch.nn.LayerNorm(ns, device=DEV)),
                             (normkit.nn.RMSNorm(ns, device=DEV), torch.nn.RMSNorm(ns, device=DEV))):
            xs = [torch.randn(shape, device=DEV, requires_grad=True) for _ in range(2)]
            outs = [ours(xs[0]), theirs(xs[1])]
            for out in outs:
                out.sum().backward()
            assert outs[0].shape == outs[1].shape and xs[0].grad.shape == xs[1].grad.shape
            assert ours.weight.grad.shape == theirs.weight.grad.shape


def test_meta_and_fake_tensors():
    x = torch.empty(6, 4, 8, device="meta", dtype=torch.bfloat16)
    w = torch.empty(4, 8, device="meta", dtype=torch.float32)
    y, mean, rstd = ops.layer_norm_forward(x, [4, 8], w, None, 1e-5)
    assert y.device.type == "meta" and y.dtype == torch.bfloat16 and mean.shape == (6, 1, 1)
    dx, dw, db = ops.layer_norm_backward(x, x, [4, 8], mean, rstd, w, None, [True, True, True])
    assert dx.shape == x.shape and dw.dtype == torch.float32 and dw.shape == (4, 8) and db.dtype == torch.float32
    dx, dw, db = ops.layer_norm_backward(x, x, [4, 8], mean, rstd, None, None, [True, True, True])
    assert dw is None and db.dtype == torch.bfloat16 and db.shape == (4, 8)


def test_eager_entry_point_and_its_fallbacks(monkeypatch):
    """normkit.layer_norm / rms_norm call _C's unboxed entry point in eager mode (the same op through
    the dispatcher: autograd and __torch_dispatch__ modes still see it), and torch.ops.normkit.* where
    Python-level handling is needed: __torch_function__ modes and overrides, FX tracing, non-tensors."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    real = normkit.functional._C
    calls = []

    class CountingC:
        def _layer_norm(self, *args):
            calls.append("ln")
            return real._layer_norm(*args)

        def _rms_norm(self, *args):
            calls.append("rms")
            return real._rms_norm(*args)

    monkeypatch.setattr(normkit.functional, "_C", CountingC())
    x, dy, w, b = make_inputs((5, 3, 32), (32,), torch.float32, DEV, affine=True, bias=True)
    grads = []
    for eager in (True, False):
        xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
        if eager:
            y = normkit.layer_norm(xg, (32,), wg, bg, 1e-5)
            r = normkit.rms_norm(xg, 32, wg)
            assert calls == ["ln", "rms"]
        else:
            y = ops.layer_norm_forward(xg, [32], wg, bg, 1e-5)[0]
            r = ops.rms_norm_forward(xg, [32], wg, None)[0]
        torch.autograd.backward((y, r), (dy, dy))
        grads.append([y.detach(), r.detach(), xg.grad, wg.grad, bg.grad])
    for got, want in zip(*grads):
        assert torch.equal(got, want)

    class SeenFunctions(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    class SeenOps(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    calls.clear()
    with SeenFunctions() as mode:
        normkit.layer_norm(x, (32,), w, b)
        normkit.rms_norm(x, (32,), w)
    assert calls == [] and any("normkit.layer_norm_forward" in f for f in mode.seen), mode.seen
    assert any("normkit.rms_norm_forward" in f for f in mode.seen), mode.seen
    with SeenOps() as mode:
        normkit.layer_norm(x, (32,), w, b)
    assert calls == ["ln"] and "normkit.layer_norm_forward.default" in mode.seen, mode.seen
    traced = torch.fx.symbolic_trace(normkit.nn.RMSNorm(32, device=DEV))
    assert "torch.ops.normkit.rms_norm_forward" in traced.code
    with pytest.raises(RuntimeError, match="normkit::layer_norm_forward"):
        normkit.layer_norm([1.0, 2.0], (2,))


# ---------------------------------------------------------------------------------------------
# errors: every message names the offending argument
# ---------------------------------------------------------------------------------------------

def test_bad_inputs_raise_clear_errors():
    x = torch.randn(4, 16, device=DEV)
    w = torch.ones(16, device=DEV)
    cases = [
        ("weight.*shape", lambda: normkit.layer_norm(x, (16,), torch.ones(15, device=DEV))),
        ("bias.*shape", lambda: normkit.layer_norm(x, (16,), w, torch.ones(4, 4, device=DEV))),
        ("weight.*shape", lambda: normkit.rms_norm(x, (16,), torch.ones(17, device=DEV))),
        ("normalized_shape", lambda: normkit.layer_norm(x, (8,), None)),
        ("normalized_shape", lambda: normkit.layer_norm(x, (2, 4, 16), None)),
        ("normalized_shape", lambda: ops.layer_norm_forward(x, [], None, None, 1e-5)),
        ("'x' has dtype", lambda: normkit.layer_norm(torch.ones(4, 16, dtype=torch.int32, device=DEV), (16,))),
        ("'x' has dtype", lambda: normkit.rms_norm(torch.ones(4, 16, dtype=torch.int64, device=DEV), (16,))),
        ("'weight' has dtype", lambda: normkit.layer_norm(x, (16,), torch.ones(16, dtype=torch.int32, device=DEV))),
        # fp16 weight with fp32 x: W must be x's dtype or float32
        ("weight", lambda: normkit.layer_norm(x, (16,), w.half())),
        ("weight", lambda: normkit.rms_norm(x.bfloat16(), (16,), w.half())),
        # bias dtype must match the weight's
        ("bias", lambda: normkit.layer_norm(x.half(), (16,), w, w.half())),
        ("eps", lambda: normkit.layer_norm(x, (16,), w, None, eps=-1.0)),
        ("eps", lambda: normkit.rms_norm(x, (16,), w, eps=float("nan"))),
        ("strategy", lambda: _backward(x, w, strategy="fastest")),
        ("grad_out", lambda: _backward(x, w, dy=torch.ones(4, 15, device=DEV))),
        ("grad_out", lambda: _backward(x, w, dy=torch.ones(4, 16, device=DEV, dtype=torch.float64))),
        ("rstd", lambda: ops.layer_norm_backward(x, x, [16], torch.zeros(4, device=DEV), torch.zeros(3, device=DEV),
                                                 w, None, [True, True, True])),
        ("mean", lambda: ops.layer_norm_backward(x, x, [16], torch.zeros(4, device=DEV, dtype=torch.float64),
                                                 torch.ones(4, device=DEV), w, None, [True, True, True])),
    ]
    for pattern, fn in cases:
        with pytest.raises(RuntimeError, match=pattern):
            fn()


def test_errors_read_the_same_in_eager_and_traced_calls():
    """The op and its fake kernel (torch.compile, export) refuse the same arguments with the same words,
    torch's dtype names included: the parameters' dtype rule (the weight, else the bias, has x's dtype or
    float32; a bias has the weight's dtype) and the backward's grad_out, statistics and strategy (the
    backward fakes used to accept them, so a traced graph failed only when run)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = torch.randn(4, 16, device=DEV)
    w = torch.ones(16, device=DEV)
    mean, rstd = torch.zeros(4, 1, device=DEV), torch.ones(4, 1, device=DEV)
    mask = [True, True, True]
    cases = [
        ("argument 'grad_out' has shape [2, 16], expected the shape of 'x' [4, 16]",
         lambda x, w: ops.layer_norm_backward(x[:2], x, [16], mean, rstd, w, None, mask)),
        ("argument 'grad_out' has dtype torch.float16, expected torch.float32 (the dtype of 'x')",
         lambda x, w: ops.rms_norm_backward(x.half(), x, [16], rstd, w, mask[:2])),
        ("argument 'mean' has dtype torch.float64, expected torch.float32 (the statistics of torch.float32 'x')",
         lambda x, w: ops.layer_norm_backward(x, x, [16], mean.double(), rstd, w, None, mask)),
        ("argument 'rstd' has 3 elements (shape [3, 1]), expected one per row, M = 4",
         lambda x, w: ops.rms_norm_backward(x, x, [16], rstd[:3], w, mask[:2])),
        ("argument 'strategy' is \"bogus\", expected one of auto, simple, tiled, two_pass, fused",
         lambda x, w: ops.layer_norm_backward(x, x, [16], mean, rstd, w, None, mask, "bogus")),
        ("argument 'weight' has dtype torch.float16, expected torch.float32 (the dtype of 'x')",
         lambda x, w: ops.layer_norm_forward(x, [16], w.half(), None, 1e-5)),
        ("argument 'bias' has dtype torch.float16, expected torch.float32 (the dtype of 'weight')",
         lambda x, w: ops.layer_norm_forward(x.half(), [16], w, w.half(), 1e-5)),
        ("argument 'bias' has dtype torch.bfloat16, expected torch.float16 (the dtype of 'x') or torch.float32",
         lambda x, w: ops.layer_norm_forward(x.half(), [16], None, w.bfloat16(), 1e-5)),
        ("argument 'weight' has dtype torch.float16, expected torch.bfloat16 (the dtype of 'x') or torch.float32",
         lambda x, w: ops.rms_norm_forward(x.bfloat16(), [16], w.half(), None)),
    ]
    for message, fn in cases:
        with pytest.raises(RuntimeError) as eager:
            fn(x, w)
        assert message in str(eager.value), str(eager.value)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode, pytest.raises(RuntimeError) as traced:
            fn(mode.from_tensor(x), mode.from_tensor(w))
        assert message in str(traced.value), str(traced.value)
        if "expected torch.float32 (the dtype of 'x')" in message:  # float32 x: its dtype is not offered twice
            assert "or torch.float32" not in str(eager.value) + str(traced.value)


def _backward(x, w, strategy="auto", dy=None):
    _, mean, rstd = ops.layer_norm_forward(x, [16], w, None, 1e-5)
    dy = torch.ones_like(x) if dy is None else dy
    return ops.layer_norm_backward(dy, x, [16], mean, rstd, w, None, [True, True, True], strategy)


@needs_cuda
def test_cpu_and_cuda_mixed_raise():
    x = torch.randn(4, 16, device="cuda")
    with pytest.raises(RuntimeError, match="'weight' is on cpu"):
        normkit.layer_norm(x, (16,), torch.ones(16))


def test_a_meta_tensor_beside_a_cpu_x_raises_naming_it():
    # The dispatcher runs the fake kernels whenever one argument is a meta tensor; they check devices
    # as the CPU op does (a meta weight beside a CPU x returned uninitialised memory before).
    x = torch.randn(4, 16)
    meta = lambda *shape: torch.ones(*shape, device="meta")  # noqa: E731
    cases = [
        ("'weight' is on meta but 'x' is on cpu", lambda: normkit.layer_norm(x, (16,), meta(16))),
        ("'bias' is on meta but 'x' is on cpu", lambda: normkit.layer_norm(x, (16,), None, meta(16))),
        ("'weight' is on meta but 'x' is on cpu", lambda: normkit.rms_norm(x, (16,), meta(16))),
        ("'weight' is on cpu but 'x' is on meta", lambda: normkit.layer_norm(meta(4, 16), (16,), torch.ones(16))),
        ("'weight' is on cpu but 'x' is on meta", lambda: normkit.nn.RMSNorm(16)(meta(4, 16))),
    ]
    _, mean, rstd = ops.layer_norm_forward(x, [16], None, None, 1e-5)
    cases += [
        ("'grad_out' is on meta", lambda: ops.layer_norm_backward(meta(4, 16), x, [16], mean, rstd, None, None,
                                                                  [True, False, False])),
        ("'mean' is on meta", lambda: ops.layer_norm_backward(x, x, [16], mean.to("meta"), rstd, None, None,
                                                              [True, False, False])),
        ("'rstd' is on meta", lambda: ops.rms_norm_backward(x, x, [16], rstd.to("meta"), None, [True, False])),
    ]
    for pattern, fn in cases:
        with pytest.raises(RuntimeError, match=pattern):
            fn()
    # every tensor on meta: shapes only, as before
    y = normkit.layer_norm(meta(4, 16), (16,), meta(16), meta(16))
    assert y.device.type == "meta" and y.shape == (4, 16)


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_an_inference_mode_input_with_a_weight_that_requires_grad(norm):
    # F.rms_norm differentiates such a call on the CPU; normkit saves a copy of the inference tensor
    # (save_for_backward refuses the tensor itself).
    with torch.inference_mode():
        x = torch.randn(4, 16, device=DEV)
    w = torch.randn(16, device=DEV, requires_grad=True)
    dy = torch.randn(4, 16, device=DEV)
    getattr(normkit, norm)(x, (16,), w).backward(dy)
    expected = w.detach().clone().requires_grad_()
    x_normal = x.clone()  # F.layer_norm refuses the inference tensor itself
    getattr(torch.nn.functional, norm)(x_normal, (16,), expected).backward(dy)
    torch.testing.assert_close(w.grad, expected.grad)


def test_queries_plan_unaligned_rows_as_the_ops_do():
    # strategy_supported / plan_backward describe contiguous rows: N = 1025 fp32 rows are not 16-byte
    # vectors, and fused keeps only vectorised rows of more than 1024 columns (the op refuses them too)
    ok, why = normkit.strategy_supported("rms_norm", 2, 1025, torch.float32, strategy="fused")
    assert not ok and why
    x = torch.randn(2, 1025, device=DEV)
    _, rstd = ops.rms_norm_forward(x, [1025], torch.ones(1025, device=DEV), None)
    with pytest.raises(RuntimeError, match="fused"):
        ops.rms_norm_backward(x, x, [1025], rstd, torch.ones(1025, device=DEV), [True, True], "fused")
    # a row of whole 16-byte vectors keeps its fused plan
    assert normkit.strategy_supported("rms_norm", 2, 1028, torch.float32, strategy="fused")[0]
    assert normkit.plan_backward("rms_norm", 2, 1028, torch.float32, strategy="fused").startswith("fused")


def test_unsupported_forced_strategy_raises_not_substitutes():
    # fused keeps a row in registers: N = 300000 bf16 cannot fit, and normkit must say so
    ok, why = normkit.strategy_supported("layer_norm", 64, 300000, torch.bfloat16, strategy="fused")
    assert not ok and "fused" in why
    with pytest.raises(RuntimeError, match="fused"):
        normkit.plan_backward("layer_norm", 64, 300000, torch.bfloat16, strategy="fused")
    dtype = torch.bfloat16
    x, dy, w, b = make_inputs((8, 300000), (300000,), dtype, DEV)
    y, mean, rstd = ops.layer_norm_forward(x, [300000], w, b, 1e-5)
    with pytest.raises(RuntimeError, match="strategy 'fused' cannot serve"):
        ops.layer_norm_backward(dy, x, [300000], mean, rstd, w, b, [True, True, True], "fused")
    with pytest.raises(RuntimeError, match="strategy 'fused' cannot serve"), normkit.backward_strategy("fused"):
        normkit.layer_norm(x, (300000,), w.detach().requires_grad_(), b).backward(dy)
    # autograd may run the backward on another thread (CUDA: its device thread): a block around the
    # forward still reaches it
    with normkit.backward_strategy("fused"):
        y2 = normkit.layer_norm(x, (300000,), w.detach().requires_grad_(), b)
    errors = []

    def run_backward():
        try:
            y2.backward(dy)
        except RuntimeError as e:
            errors.append(str(e))

    worker = threading.Thread(target=run_backward)
    worker.start()
    worker.join()
    assert len(errors) == 1 and "strategy 'fused' cannot serve" in errors[0], errors
    assert normkit.get_backward_strategy() == "auto"
    # auto picks something that serves it
    dx, dw, db = ops.layer_norm_backward(dy, x, [300000], mean, rstd, w, b, [True, True, True], "auto")
    reference("ln", x, (300000,), w, b, 1e-5, dy, {"dx": dx, "dw": dw, "db": db}, TOL[dtype])


# seed-like shapes spanning every band, the two-pass regime and a wide row
STRATEGY_SHAPES = [((8, 1024), torch.float16), ((96, 768), torch.bfloat16), ((4096, 1024), torch.float16),
                   ((131072, 64), torch.float16), ((256, 8192), torch.float32), ((512, 40000), torch.bfloat16)]


@needs_cuda
def test_every_forced_strategy_gives_the_same_grads():
    for (m, n), dtype in STRATEGY_SHAPES:
        for op in ("layer_norm", "rms_norm"):
            x, dy, w, b = make_inputs((m, n), (n,), dtype, "cuda")
            results = {}
            for strategy in normkit.STRATEGIES:
                ok, why = normkit.strategy_supported(op, m, n, dtype, strategy=strategy)
                if op == "layer_norm":
                    y, mean, rstd = ops.layer_norm_forward(x, [n], w, b, 1e-5)
                    call = lambda s: ops.layer_norm_backward(dy, x, [n], mean, rstd, w, b, [True, True, True], s)
                else:
                    y, rstd = ops.rms_norm_forward(x, [n], w, 1e-6)
                    call = lambda s: ops.rms_norm_backward(dy, x, [n], rstd, w, [True, True], s)
                if not ok:
                    with pytest.raises(RuntimeError, match=f"strategy '{strategy}' cannot serve"):
                        call(strategy)
                    continue
                grads = call(strategy)
                assert normkit.plan_backward(op, m, n, dtype, strategy=strategy).split()[0] in normkit.STRATEGIES
                results[strategy] = grads
            assert {"auto", "simple", "tiled", "two_pass"} <= set(results), (m, n, op, list(results))
            kind = "ln" if op == "layer_norm" else "rms"
            for strategy, grads in results.items():
                out = dict(zip(("dx", "dw", "db"), grads))
                try:
                    reference(kind, x, (n,), w, b if kind == "ln" else None, 1e-5 if kind == "ln" else 1e-6, dy,
                              out, TOL[dtype], check=("dx", "dw", "db"))
                except AssertionError as e:
                    raise AssertionError(f"{op} {(m, n)} {dtype} strategy {strategy}: {e}") from None
                # all strategies agree with each other as closely as with the reference
                for key, a, r in zip(("dx", "dw", "db"), grads, results["auto"]):
                    if a is not None:
                        assert_close(f"{op} {(m, n)} {strategy} vs auto {key}", a, r, TOL[dtype])


def test_plan_query_describes_strategies():
    assert normkit.plan_backward("layer_norm", 4096, 1024, torch.float16, strategy="two_pass").startswith("two_pass")
    assert normkit.plan_backward("rms_norm", 4, 1024, torch.float16, strategy="simple").startswith("simple")
    assert normkit.plan_backward("layer_norm", 4096, 1024, torch.float16, strategy="fused").startswith("fused")
    with pytest.raises(RuntimeError, match="'op'"):
        normkit.plan_backward("batch_norm", 4, 4, torch.float16)
    with pytest.raises(RuntimeError, match="strategy"):
        normkit.plan_backward("layer_norm", 4, 4, torch.float16, strategy="fastest")
    with pytest.raises(RuntimeError, match="'dtype'"):
        normkit.plan_backward("layer_norm", 4, 4, torch.int32)
