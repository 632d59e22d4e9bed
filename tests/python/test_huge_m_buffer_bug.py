"""The seed's huge-M bug (ROCM-24994, live in ATen on CUDA too): the two-pass gamma/beta path sized
its scratch buffers from dgamma.size(-1) instead of N, so a multi-dim normalized_shape, or an
undefined gamma, broke. In normkit both must pass, under every strategy that serves the shape."""
import pytest

torch = pytest.importorskip("torch")
normkit = pytest.importorskip("normkit")

from nk_testutil import TOL, assert_close, device, make_inputs, reference  # noqa: E402

DEV = device()
M = 100000


def _strategies(m, n, dtype, mask):
    out = []
    for s in ("auto", "two_pass", "tiled", "fused"):
        if normkit.strategy_supported("layer_norm", m, n, dtype, mask=mask, strategy=s)[0]:
            out.append(s)
    assert "auto" in out and "two_pass" in out, out
    return out


def test_layer_norm_huge_M_multidim_normalized_shape():
    dtype = torch.float16 if DEV == "cuda" else torch.float32
    ns = (8, 16)
    x, dy, w, b = make_inputs((M, *ns), ns, dtype, DEV)
    for strategy in _strategies(M, 128, dtype, (True, True, True)):
        xl = x.detach().clone().requires_grad_()
        wl = w.detach().clone().requires_grad_()
        bl = b.detach().clone().requires_grad_()
        with normkit.backward_strategy(strategy):
            y = normkit.layer_norm(xl, ns, wl, bl, eps=1e-5)
            y.backward(dy)
        assert wl.grad.shape == ns and bl.grad.shape == ns, strategy
        try:
            reference("ln", x, ns, w, b, 1e-5, dy,
                      {"y": y.detach(), "dx": xl.grad, "dw": wl.grad, "db": bl.grad}, TOL[dtype])
        except AssertionError as e:
            raise AssertionError(f"strategy {strategy}: {e}") from None


def test_layer_norm_huge_M_undefined_gamma_dbeta_shape():
    dtype = torch.float16 if DEV == "cuda" else torch.float32
    for ns in ((128,), (8, 16)):
        x, dy, _, b = make_inputs((M, *ns), ns, dtype, DEV, seed=len(ns))
        for strategy in _strategies(M, 128, dtype, (True, False, True)):
            xl = x.detach().clone().requires_grad_()
            bl = b.detach().clone().requires_grad_()
            with normkit.backward_strategy(strategy):
                normkit.layer_norm(xl, ns, None, bl).backward(dy)
            assert bl.grad.shape == ns and bl.grad.dtype == b.dtype, (strategy, bl.grad.shape)
            # the op itself: dweight requested without a weight is None (documented); dbias has N values
            y, mean, rstd = torch.ops.normkit.layer_norm_forward(x, list(ns), None, b, 1e-5)
            dx, dw, db = torch.ops.normkit.layer_norm_backward(dy, x, list(ns), mean, rstd, None, b,
                                                               [True, True, True], strategy)
            assert dw is None and db.shape == ns
            # same plan up to the dweight request: equal up to reduction order
            assert_close("dbias (op vs autograd)", db, bl.grad, TOL[dtype])
            assert_close("dx (op vs autograd)", dx, xl.grad, TOL[dtype])
            try:
                reference("ln", x, ns, None, b, 1e-5, dy, {"y": y, "dx": dx, "db": db}, TOL[dtype])
            except AssertionError as e:
                raise AssertionError(f"normalized_shape {ns}, strategy {strategy}: {e}") from None
