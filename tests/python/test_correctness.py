"""The seed PR's correctness tests (same names and cases), against a float64 CPU reference.

On a CUDA machine every case runs normkit's kernels. Without CUDA the same tests run the CPU path
(normkit's float64 reference) on every case small enough for the CPU; the LLM-sized cases skip.
"""
import math
import re

import pytest

torch = pytest.importorskip("torch")

from nk_testutil import TOL, assert_close, device, make_inputs, reference, import_normkit  # noqa: E402

normkit = import_normkit()

DEV = device()
CPU_MAX_ELEMENTS = 1 << 24  # the seed's (32, 4096, 4096) cases need the GPU

# name: (shape of x, dtype, band the tiled strategy must use)  -- the seed table
LAYER_NORM_CASES = {
    "tile8_small": ((32, 512), torch.float16, "tile8"),
    "tile64_medium": ((96, 768), torch.float16, "tile64"),
    "tile128_medium": ((192, 1024), torch.bfloat16, "tile128"),
    "tile256_large": ((4096, 1024), torch.float16, "tile256"),
    "tile256_bert": ((1024, 768), torch.float16, "tile256"),
    "tile256_large_bf16": ((4096, 1024), torch.bfloat16, "tile256"),
    "tile256_large_fp32": ((4096, 1024), torch.float32, "tile256"),
    "two_pass_huge_M": ((131072, 64), torch.float16, "tile256"),
    "llm_hidden_4096": ((32, 4096, 4096), torch.bfloat16, "tile256"),
    "gpt2_style": ((8, 1024, 768), torch.float16, "tile256"),
}
RMS_NORM_CASES = {
    "rms_tile256": ((4096, 1024), torch.float16, "tile256"),
    "rms_llm": ((32, 4096, 4096), torch.bfloat16, "tile256"),
    "rms_two_pass": ((131072, 64), torch.float16, "tile256"),
}


def _skip_if_too_big_for_cpu(shape):
    if DEV == "cpu" and math.prod(shape) > CPU_MAX_ELEMENTS:
        pytest.skip(f"{shape} is too large for the CPU reference path; it runs on CUDA")


def _run_layer_norm(x, dy, w, b, eps=1e-5, mask=(True, True, True), strategy="auto"):
    ns = list(x.shape[-1:])
    y, mean, rstd = torch.ops.normkit.layer_norm_forward(x, ns, w, b, eps)
    dx, dw, db = torch.ops.normkit.layer_norm_backward(dy, x, ns, mean, rstd, w, b, list(mask), strategy)
    return {"y": y, "mean": mean, "rstd": rstd, "dx": dx, "dw": dw, "db": db}


def _run_rms_norm(x, dy, w, eps=None, mask=(True, True), strategy="auto"):
    ns = list(x.shape[-1:])
    y, rstd = torch.ops.normkit.rms_norm_forward(x, ns, w, eps)
    dx, dw = torch.ops.normkit.rms_norm_backward(dy, x, ns, rstd, w, list(mask), strategy)
    return {"y": y, "rstd": rstd, "dx": dx, "dw": dw}


@pytest.mark.parametrize("case", list(LAYER_NORM_CASES))
def test_layer_norm_gamma_beta_backward_matches_cpu_reference(case):
    shape, dtype, _ = LAYER_NORM_CASES[case]
    _skip_if_too_big_for_cpu(shape)
    x, dy, w, b = make_inputs(shape, shape[-1:], dtype, DEV)
    out = _run_layer_norm(x, dy, w, b)
    assert out["mean"].dtype == torch.float32 and out["rstd"].dtype == torch.float32
    assert out["mean"].shape == (*shape[:-1], 1)
    reference("ln", x, shape[-1:], w, b, 1e-5, dy, out, TOL[dtype])


@pytest.mark.parametrize("case", list(RMS_NORM_CASES))
def test_rms_norm_gamma_backward_matches_cpu_reference(case):
    shape, dtype, _ = RMS_NORM_CASES[case]
    _skip_if_too_big_for_cpu(shape)
    x, dy, w, _ = make_inputs(shape, shape[-1:], dtype, DEV, bias=False)
    eps = 1e-6
    out = _run_rms_norm(x, dy, w, eps)
    assert out["rstd"].dtype == torch.float32 and out["rstd"].shape == (*shape[:-1], 1)
    reference("rms", x, shape[-1:], w, None, eps, dy, out, TOL[dtype], check=("y", "dx", "dw"))


def test_edge_case_shape_M_eq_1():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 7, 768, 4096, 20000):
            x, dy, w, b = make_inputs((1, n), (n,), dtype, DEV, seed=n)
            out = _run_layer_norm(x, dy, w, b)
            reference("ln", x, (n,), w, b, 1e-5, dy, out, TOL[dtype])
            out = _run_rms_norm(x, dy, w, 1e-6)
            reference("rms", x, (n,), w, None, 1e-6, dy, out, TOL[dtype], check=_rms_checks(n))


def _rms_checks(n):
    # RMSNorm with N = 1: dx = rstd * g * (1 - xhat^2) with xhat^2 = x^2 / (x^2 + eps) ~ 1, so dx is
    # the difference of two nearly equal numbers, and rstd is an fp32 forward output (as in ATen):
    # its rounding alone moves dx by ~100%. Only y and dweight are well-conditioned there.
    return ("y", "dw") if n == 1 else ("y", "dx", "dw")


def test_edge_case_shape_N_eq_1():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for m in (1, 33, 4096):
            x, dy, w, b = make_inputs((m, 1), (1,), dtype, DEV, seed=m)
            out = _run_layer_norm(x, dy, w, b)
            # N = 1: every x-hat is 0, so the reference has y = bias, dx = 0 and dweight = 0, which
            # the comparison checks in absolute terms (relative error is undefined against 0)
            reference("ln", x, (1,), w, b, 1e-5, dy, out, TOL[dtype])
            out = _run_rms_norm(x, dy, w, 1e-6)
            reference("rms", x, (1,), w, None, 1e-6, dy, out, TOL[dtype], check=_rms_checks(1))


def test_noncontiguous_input_matches_reference():
    dtype = torch.float16 if DEV == "cuda" else torch.float32
    tol = TOL[dtype]
    n = 256
    base, base_dy, w, b = make_inputs((64, 3 * n), (n,), dtype, DEV)
    big, big_dy, _, _ = make_inputs((8, 16, 2 * n), (2 * n,), dtype, DEV, seed=1)
    layouts = {
        # rows `3n` apart: served in place through row_stride
        "row_stride": (base[:, n:2 * n], base_dy[:, :n]),
        # the normalized dim strided: copied once
        "strided_columns": (base[:, ::3], base_dy[:, 1::3]),
        # leading dims transposed: not one row stride, copied once
        "transposed_leading": (big[:, :, :n].transpose(0, 1), big_dy[:, :, n:].transpose(0, 1)),
        # dy broadcast along the rows (as autograd hands it for y.sum()): stride 0
        "expanded_grad": (base[:, :n], base_dy[:1, :n].expand(64, n)),
    }
    for name, (x, dy) in layouts.items():
        assert not x.is_contiguous() or not dy.is_contiguous(), name
        out = _run_layer_norm(x, dy, w, b)
        assert out["y"].is_contiguous() and out["dx"].is_contiguous(), name
        try:
            reference("ln", x, (n,), w, b, 1e-5, dy, out, tol)
            out = _run_rms_norm(x, dy, w, 1e-6)
            reference("rms", x, (n,), w, None, 1e-6, dy, out, tol, check=("y", "dx", "dw"))
        except AssertionError as e:
            raise AssertionError(f"layout {name}: {e}") from None
        # same values as the contiguous input, bit for bit on the CPU path
        if DEV == "cpu":
            strided = _run_layer_norm(x, dy, w, b)
            packed = _run_layer_norm(x.contiguous(), dy.contiguous(), w, b)
            for key in ("y", "dx", "dw", "db"):
                assert torch.equal(strided[key], packed[key]), (name, key)


def _autograd_check(module_nk, module_ref, x, dy, dtype):
    xr = x.detach().to("cpu", torch.float64).requires_grad_()
    xn = x.detach().clone().requires_grad_()
    y = module_nk(xn)
    assert y.dtype == x.dtype and y.shape == x.shape
    y.backward(dy)
    yr = module_ref(xr)
    yr.backward(dy.to("cpu", torch.float64))
    tol = TOL[dtype]
    assert_close("y", y, yr, tol)
    assert_close("x.grad", xn.grad, xr.grad, tol)
    for (name, p), (_, pr) in zip(module_nk.named_parameters(), module_ref.named_parameters()):
        assert p.grad is not None and p.grad.shape == p.shape and p.grad.dtype == p.dtype, name
        assert_close(f"{name}.grad", p.grad, pr.grad, tol)


def test_layer_norm_autograd_matches_cpu_reference():
    dtypes = (torch.float32, torch.float16, torch.bfloat16) if DEV == "cuda" else (torch.float32, torch.bfloat16)
    shape, ns = (4, 50, 8, 96), (8, 96)
    for dtype in dtypes:
        for weight_dtype in {dtype, torch.float32}:
            nk = normkit.nn.LayerNorm(ns, eps=1e-5, device=DEV, dtype=weight_dtype)
            with torch.no_grad():
                nk.weight.copy_(1 + 0.1 * torch.randn(ns))
                nk.bias.copy_(0.1 * torch.randn(ns))
            ref = torch.nn.LayerNorm(ns, eps=1e-5, dtype=torch.float64)
            ref.load_state_dict({k: v.double().cpu() for k, v in nk.state_dict().items()})
            x, dy, _, _ = make_inputs(shape, ns, dtype, DEV)
            _autograd_check(nk, ref, x, dy, dtype)


def test_rms_norm_autograd_matches_cpu_reference():
    dtypes = (torch.float32, torch.float16, torch.bfloat16) if DEV == "cuda" else (torch.float32, torch.bfloat16)
    shape, ns = (6, 40, 1024), (1024,)
    for dtype in dtypes:
        for eps in (None, 1e-6):
            nk = normkit.nn.RMSNorm(ns, eps=eps, device=DEV, dtype=dtype)
            with torch.no_grad():
                nk.weight.copy_(1 + 0.1 * torch.randn(ns))
            # eps=None is float32's epsilon for these dtypes (ATen's op-math type): give the float64 reference
            # the same number
            ref = torch.nn.RMSNorm(ns, eps=torch.finfo(torch.float32).eps if eps is None else eps, dtype=torch.float64)
            ref.load_state_dict({k: v.double().cpu() for k, v in nk.state_dict().items()})
            x, dy, _, _ = make_inputs(shape, ns, dtype, DEV)
            _autograd_check(nk, ref, x, dy, dtype)


@pytest.mark.parametrize("mask_name", ["dgamma_and_dbeta", "dgamma_only", "dbeta_only"])
def test_output_mask_selects_expected_grads(mask_name):
    want_w, want_b = {"dgamma_and_dbeta": (True, True), "dgamma_only": (True, False),
                      "dbeta_only": (False, True)}[mask_name]
    dtype = torch.float16 if DEV == "cuda" else torch.float32
    for shape in ((32, 512), (4096, 1024)):
        x, dy, w, b = make_inputs(shape, shape[-1:], dtype, DEV)
        # the op, dx not requested
        out = _run_layer_norm(x, dy, w, b, mask=(False, want_w, want_b))
        assert out["dx"] is None
        assert (out["dw"] is not None) == want_w and (out["db"] is not None) == want_b
        reference("ln", x, shape[-1:], w, b, 1e-5, dy, out, TOL[dtype], check=("dw", "db"))
        # autograd asks for exactly the gradients of the leaves that require them
        wl = w.detach().clone().requires_grad_(want_w)
        bl = b.detach().clone().requires_grad_(want_b)
        normkit.layer_norm(x, shape[-1:], wl, bl).backward(dy)
        assert (wl.grad is not None) == want_w and (bl.grad is not None) == want_b
        if want_w:
            assert_close("weight.grad vs op", wl.grad, out["dw"], TOL[dtype])
        if want_b:
            assert_close("bias.grad vs op", bl.grad, out["db"], TOL[dtype])


def _band(desc):
    m = re.search(r"\btile-?(8|64|128|256)\b", desc.lower())
    return f"tile{m.group(1)}" if m else None


def test_configs_cover_all_tile_branches():
    seen = set()
    for table, op in ((LAYER_NORM_CASES, "layer_norm"), (RMS_NORM_CASES, "rms_norm")):
        for name, (shape, dtype, band) in table.items():
            m, n = math.prod(shape[:-1]), shape[-1]
            desc = normkit.plan_backward(op, m, n, dtype, strategy="tiled")
            assert desc.startswith("tiled"), (name, desc)
            assert _band(desc) == band, f"{name}: M={m} planned {desc!r}, expected band {band}"
            seen.add(band)
            # every strategy name appears in the plan it forces, when it can serve the shape
            for strategy in ("simple", "two_pass", "fused"):
                ok, why = normkit.strategy_supported(op, m, n, dtype, strategy=strategy)
                if ok:
                    assert normkit.plan_backward(op, m, n, dtype, strategy=strategy).startswith(strategy)
                else:
                    assert why, (name, strategy)
                    with pytest.raises(RuntimeError, match=strategy):
                        normkit.plan_backward(op, m, n, dtype, strategy=strategy)
            auto = normkit.plan_backward(op, m, n, dtype)
            assert auto.split()[0] in ("simple", "tiled", "two_pass", "fused"), auto
    assert seen == {"tile8", "tile64", "tile128", "tile256"}
    # the band boundaries of the seed: 64, 128, 256 rows
    for m, band in ((1, "tile8"), (63, "tile8"), (64, "tile64"), (127, "tile64"), (128, "tile128"),
                    (255, "tile128"), (256, "tile256"), (1 << 20, "tile256")):
        assert _band(normkit.plan_backward("layer_norm", m, 1024, torch.float16, strategy="tiled")) == band, m
    # dX-only backward has no gamma/beta reduction to plan
    assert normkit.plan_backward("layer_norm", 4096, 1024, torch.float16, mask=(True, False, False)).startswith("dx_only")
