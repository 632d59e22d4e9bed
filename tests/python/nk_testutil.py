"""Shared helpers of the normkit pytest suite: the float64 reference (plain torch formulas, run on
the CPU, independent of normkit) and error measures."""
import math

import torch

# relative L2 tolerances vs float64 (shared/norm-math.md)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float64: 1e-12}

# Rows per reference chunk: bounds the float64 working set of the big seed shapes (32*4096 x 4096).
_CHUNK_ELEMENTS = 1 << 24


def import_normkit():
    """normkit itself is not optional here: a missing or broken install fails the suite, loudly."""
    try:
        import normkit
    except ModuleNotFoundError as e:
        raise ImportError("normkit is not installed: run `pip install --no-build-isolation .` in the repository "
                          "root before `pytest tests/python`") from e
    return normkit


def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


class Err:
    """Accumulates ||a - ref||^2 and ||ref||^2 over chunks; rel() is the relative L2 error. A NaN in
    `a` never passes unless the reference is NaN at the same place."""

    def __init__(self):
        self.diff = 0.0
        self.ref = 0.0
        self.nan_mismatch = 0

    def add(self, a, ref):
        a = a.detach().to("cpu", torch.float64)
        ref = ref.detach().to("cpu", torch.float64)
        assert a.shape == ref.shape, f"shape {tuple(a.shape)} vs reference {tuple(ref.shape)}"
        a_nan, r_nan = torch.isnan(a), torch.isnan(ref)
        self.nan_mismatch += int((a_nan != r_nan).sum())
        keep = ~(a_nan & r_nan)
        self.diff += float(((a - ref)[keep] ** 2).sum())
        self.ref += float((ref[keep] ** 2).sum())

    def rel(self):
        if self.nan_mismatch:
            return math.inf
        if self.ref == 0.0:
            return math.sqrt(self.diff)  # reference exactly zero: the error is absolute
        return math.sqrt(self.diff / self.ref)


def rel_l2(a, ref):
    e = Err()
    e.add(a, ref)
    return e.rel()


def assert_close(name, a, ref, tol):
    err = rel_l2(a, ref)
    assert err <= tol, f"{name}: relative L2 error {err:.3e} > {tol:.1e}"


def _chunks(rows, cols):
    step = max(1, _CHUNK_ELEMENTS // max(cols, 1))
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def reference(kind, x, normalized_shape, weight, bias, eps, dy, out, tol, check=("y", "dx", "dw", "db")):
    """Compares normkit's results `out` (dict with any of y, mean, rstd, dx, dw, db) with a float64
    CPU computation of the same LayerNorm ("ln") or RMSNorm ("rms") from the same inputs,
    chunked over rows. Raises AssertionError naming the first output out of tolerance."""
    k = len(normalized_shape)
    n = math.prod(normalized_shape)
    m = x.numel() // n if n else 0
    x2 = x.reshape(m, n)
    dy2 = dy.reshape(m, n) if dy is not None else None
    w = weight.detach().to("cpu", torch.float64).reshape(n) if weight is not None else None
    b = bias.detach().to("cpu", torch.float64).reshape(n) if bias is not None else None
    errs = {key: Err() for key in ("y", "mean", "rstd", "dx")}
    dw = torch.zeros(n, dtype=torch.float64)
    db = torch.zeros(n, dtype=torch.float64)
    flat = {key: out[key].reshape(m, -1) if out.get(key) is not None and key in ("y", "dx", "mean", "rstd") else None
            for key in ("y", "dx", "mean", "rstd")}
    for s, e in _chunks(m, n):
        xc = x2[s:e].detach().to("cpu", torch.float64)
        if kind == "ln":
            mu = xc.mean(dim=1, keepdim=True)
            var = ((xc - mu) ** 2).mean(dim=1, keepdim=True)
        else:
            mu = torch.zeros(xc.shape[0], 1, dtype=torch.float64)
            var = (xc * xc).mean(dim=1, keepdim=True)
        rstd = 1.0 / torch.sqrt(var + eps)
        xhat = (xc - mu) * rstd
        if flat["y"] is not None:
            y = xhat * w if w is not None else xhat.clone()
            if b is not None:
                y = y + b
            errs["y"].add(flat["y"][s:e], y)
        if flat["rstd"] is not None:
            errs["rstd"].add(flat["rstd"][s:e], rstd)
        if flat["mean"] is not None:
            # mean is compared in units of the row's standard deviation (well-conditioned)
            errs["mean"].add(flat["mean"][s:e].double().cpu() * rstd, mu * rstd)
        if dy2 is None:
            continue
        dyc = dy2[s:e].detach().to("cpu", torch.float64)
        dw += (dyc * xhat).sum(dim=0)
        db += dyc.sum(dim=0)
        if flat["dx"] is not None:
            g = dyc * w if w is not None else dyc
            gx = (g * xhat).mean(dim=1, keepdim=True)
            if kind == "ln":
                dx = rstd * (g - g.mean(dim=1, keepdim=True) - xhat * gx)
            else:
                dx = rstd * (g - xhat * gx)
            errs["dx"].add(flat["dx"][s:e], dx)
    failures = []
    for key in ("y", "dx"):
        if key in check and flat[key] is not None and errs[key].rel() > tol:
            failures.append(f"{key}: rel L2 {errs[key].rel():.3e} > {tol:.1e}")
    for key in ("mean", "rstd"):
        if flat[key] is not None and errs[key].rel() > max(tol, 1e-5):
            failures.append(f"{key}: rel L2 {errs[key].rel():.3e} > {max(tol, 1e-5):.1e}")
    if "dw" in check and out.get("dw") is not None:
        assert tuple(out["dw"].shape) == tuple(normalized_shape), f"dweight shape {tuple(out['dw'].shape)}"
        err = rel_l2(out["dw"].reshape(n), dw)
        if err > tol:
            failures.append(f"dweight: rel L2 {err:.3e} > {tol:.1e}")
    if "db" in check and out.get("db") is not None:
        assert tuple(out["db"].shape) == tuple(normalized_shape), f"dbias shape {tuple(out['db'].shape)}"
        err = rel_l2(out["db"].reshape(n), db)
        if err > tol:
            failures.append(f"dbias: rel L2 {err:.3e} > {tol:.1e}")
    assert not failures, f"{kind} M={m} N={n} dtype={x.dtype}: " + "; ".join(failures)
    return {"dw": dw.reshape(normalized_shape), "db": db.reshape(normalized_shape)}


def make_inputs(shape, normalized_shape, dtype, dev, weight_dtype=None, affine=True, bias=True, seed=0):
    """x ~ N(0.5, 2) (a non-zero mean exercises the centring), dy ~ N(0, 1), weight ~ 1 + N(0, 0.1),
    bias ~ N(0, 0.1); generated in float32 on `dev` and rounded to `dtype`."""
    g = torch.Generator(device=dev).manual_seed(seed)
    wd = weight_dtype or dtype
    x = (torch.randn(shape, generator=g, device=dev) * 2 + 0.5).to(dtype)
    dy = torch.randn(shape, generator=g, device=dev).to(dtype)
    w = (1 + 0.1 * torch.randn(normalized_shape, generator=g, device=dev)).to(wd) if affine else None
    b = (0.1 * torch.randn(normalized_shape, generator=g, device=dev)).to(wd) if (affine and bias) else None
    return x, dy, w, b
