"""The seed's huge-M bug (ROCM-24994, live in ATen on CUDA too): the two-pass gamma/beta path sized
its scratch buffers from dgamma.size(-1) instead of N, so a multi-dim normalized_shape, or an
undefined gamma, broke. In normkit both must pass, under every strategy that serves the shape
(on the CPU path strategies do not change the arithmetic, so only auto and two_pass run there)."""
import pytest

torch = pytest.importorskip("torch")

from nk_testutil import TOL, assert_close, device, make_inputs, reference, import_normkit  # noqa: E402

normkit = import_normkit()

DEV = device()
M = 100000


def _strategies(n, dtype, mask):
    candidates = ("auto", "two_pass", "tiled", "fused", "simple") if DEV == "cuda" else ("auto", "two_pass")
    out = [s for s in candidates
           if normkit.strategy_supported("layer_norm", M, n, dtype, mask=mask, strategy=s)[0]]
    assert out[:2] == ["auto", "two_pass"], out
    return out


def test_layer_norm_huge_M_multidim_normalized_shape():
    dtype = torch.float16 if DEV == "cuda" else torch.float32
    tol = TOL[dtype]
    ns = (8, 16)
    x, dy, w, b = make_inputs((M, *ns), ns, dtype, DEV)
    first = None
    for strategy in _strategies(128, dtype, (True, True, True)):
        xl = x.detach().clone().requires_grad_()
        wl = w.detach().clone().requires_grad_()
        bl = b.detach().clone().requires_grad_()
        with normkit.backward_strategy(strategy):
            y = normkit.layer_norm(xl, ns, wl, bl, eps=1e-5)
            y.backward(dy)
        assert wl.grad.shape == ns and bl.grad.shape == ns, strategy
        assert wl.grad.dtype == dtype and bl.grad.dtype == dtype
        if first is None:  # the float64 reference once; the other strategies against it
            ref = reference("ln", x, ns, w, b, 1e-5, dy,
                            {"y": y.detach(), "dx": xl.grad, "dw": wl.grad, "db": bl.grad}, tol)
            first = xl.grad
            continue
        assert_close(f"{strategy}: weight.grad", wl.grad, ref["dw"], tol)
        assert_close(f"{strategy}: bias.grad", bl.grad, ref["db"], tol)
        assert_close(f"{strategy}: x.grad vs auto", xl.grad, first, tol)


def test_layer_norm_huge_M_undefined_gamma_dbeta_shape():
    dtype = torch.float16 if DEV == "cuda" else torch.float32
    tol = TOL[dtype]
    for ns in ((128,), (8, 16)):
        x, dy, _, b = make_inputs((M, *ns), ns, dtype, DEV, seed=len(ns))
        y, mean, rstd = torch.ops.normkit.layer_norm_forward(x, list(ns), None, b, 1e-5)
        ref = None
        for strategy in _strategies(128, dtype, (True, False, True)):
            # the op: dweight requested without a weight is None (documented); dbias has N values
            dx, dw, db = torch.ops.normkit.layer_norm_backward(dy, x, list(ns), mean, rstd, None, b,
                                                               [True, True, True], strategy)
            assert dw is None and db.shape == ns and db.dtype == b.dtype, (strategy, db.shape)
            if ref is None:
                ref = reference("ln", x, ns, None, b, 1e-5, dy, {"y": y, "dx": dx, "db": db}, tol)
                first_dx = dx
            else:
                assert_close(f"{ns} {strategy}: dbias", db, ref["db"], tol)
                assert_close(f"{ns} {strategy}: dx vs auto", dx, first_dx, tol)
            # autograd: only x and bias require grad
            xl = x.detach().clone().requires_grad_()
            bl = b.detach().clone().requires_grad_()
            with normkit.backward_strategy(strategy):
                normkit.layer_norm(xl, ns, None, bl).backward(dy)
            assert bl.grad.shape == ns and bl.grad.dtype == b.dtype
            assert_close(f"{ns} {strategy}: bias.grad", bl.grad, ref["db"], tol)
            assert_close(f"{ns} {strategy}: x.grad", xl.grad, first_dx, tol)
