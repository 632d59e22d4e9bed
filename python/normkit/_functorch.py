"""normkit.layer_norm / rms_norm under torch.func transforms (grad, vjp, jacrev, vmap over them).

The ops' autograd is C++ (python/csrc/autograd.cpp, a torch::autograd::Function: a fraction of the host
time of a Python registration), and functorch refuses C++ Functions ("cannot use C++
torch::autograd::Function with functorch transforms"). While a transform is active, functional.py calls
these Python Functions instead: the same ops and formulas, in the form functorch supports
(setup_context and vmap staticmethods). Their forward runs with grad mode off, where the ops skip their C++
autograd. vmap: a forward whose weight and bias are not batched folds the batch into its rows (one call:
normalization is row by row); otherwise, and for the backward ops (whose dweight / dbias must stay per
batch entry, and whose optional outputs PyTorch's generic fallback cannot batch), one call per batch entry.
"""
import math

import torch

from . import _C
from ._ops import _DOUBLE_BACKWARD, _check_common, _raise_unless, _stats_dtype


def _vmap_by_entry(fn, info, in_dims, args):
    """vmap of fn by calling it once per batch entry (arguments with a batch dim indexed there) and stacking
    each output on dim 0; outputs that are None stay None."""
    def entry(i):  # in_dims of a list argument (a shape, a mask) is a list of Nones: not batched
        return fn(*[a.select(d, i) if isinstance(a, torch.Tensor) and d is not None else a
                    for a, d in zip(args, in_dims)])

    entries = [entry(i) for i in range(info.batch_size)]
    outputs = tuple(None if out[0] is None else torch.stack(list(out)) for out in zip(*entries))
    return outputs, tuple(None if o is None else 0 for o in outputs)


def _vmap_forward(function, info, in_dims, x, normalized_shape, params, eps):
    """vmap of a forward: the batch folded into the rows when only x is batched, else by entry. It calls the
    Function itself again (not the op), so that the transforms outside this vmap level -- grad(vmap(f)),
    vmap(vmap(f)), vmap(jacrev(f)) -- see a Function they accept: the op would reach its C++ autograd,
    which functorch refuses, or a vmap level with no batching rule."""
    x_dim = in_dims[0]
    if x_dim is not None and all(d is None for d in in_dims[2:2 + len(params)]):
        outputs = function.apply(x.movedim(x_dim, 0), normalized_shape, *params, eps)
        return outputs, tuple(0 for _ in outputs)
    return _vmap_by_entry(lambda x_i, *params_i: function.apply(x_i, normalized_shape, *params_i, eps), info,
                          (x_dim, *in_dims[2:2 + len(params)]), (x, *params))


class _BackwardOp(torch.autograd.Function):
    """A backward op as a Function functorch accepts, whose own derivative raises: the ops' registered
    autograd (python/normkit/_ops.py, through torch.library) is refused under transforms, and calling
    the op below autograd alone would let a second derivative come out silently zero."""
    @staticmethod
    def forward(op_name, *args):
        with torch._C._AutoDispatchBelowAutograd():
            return getattr(torch.ops.normkit, op_name)(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.op_name = inputs[0]

    @staticmethod
    def vmap(info, in_dims, op_name, *args):
        # by entry, through apply again (as _vmap_forward, for the levels outside this one)
        return _vmap_by_entry(lambda *a: _BackwardOp.apply(op_name, *a), info, in_dims[1:], args)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(_DOUBLE_BACKWARD.format(op="normkit::" + ctx.op_name))


def _strategy_at_forward():
    """The strategy forced when the forward ran (None: none); the backward prefers its own thread's."""
    return _C._backward_strategy()


def _strategy_for_backward(ctx):
    return _C._backward_strategy() or ctx.strategy or "auto"


class LayerNorm(torch.autograd.Function):
    """torch.ops.normkit.layer_norm_forward with its backward, for torch.func."""

    @staticmethod
    def forward(x, normalized_shape, weight, bias, eps):
        return torch.ops.normkit.layer_norm_forward(x, normalized_shape, weight, bias, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, normalized_shape, weight, bias, _ = inputs
        _, mean, rstd = output
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.normalized_shape = normalized_shape
        ctx.strategy = _strategy_at_forward()
        ctx.mark_non_differentiable(mean, rstd)

    @staticmethod
    def backward(ctx, dy, _dmean, _drstd):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        needs = ctx.needs_input_grad
        mask = [needs[0], weight is not None and needs[2], bias is not None and needs[3]]
        if not any(mask):
            return None, None, None, None, None
        dx, dweight, dbias = _BackwardOp.apply("layer_norm_backward", dy, x, ctx.normalized_shape, mean, rstd, weight,
                                               bias, mask, _strategy_for_backward(ctx))
        return dx, None, dweight, dbias, None

    @staticmethod
    def vmap(info, in_dims, x, normalized_shape, weight, bias, eps):
        return _vmap_forward(LayerNorm, info, in_dims, x, normalized_shape, (weight, bias), eps)


class RmsNorm(torch.autograd.Function):
    """torch.ops.normkit.rms_norm_forward with its backward, for torch.func."""

    @staticmethod
    def forward(x, normalized_shape, weight, eps):
        return torch.ops.normkit.rms_norm_forward(x, normalized_shape, weight, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, normalized_shape, weight, _ = inputs
        _, rstd = output
        ctx.save_for_backward(x, weight, rstd)
        ctx.normalized_shape = normalized_shape
        ctx.strategy = _strategy_at_forward()
        ctx.mark_non_differentiable(rstd)

    @staticmethod
    def backward(ctx, dy, _drstd):
        x, weight, rstd = ctx.saved_tensors
        needs = ctx.needs_input_grad
        mask = [needs[0], weight is not None and needs[2]]
        if not any(mask):
            return None, None, None, None
        dx, dweight = _BackwardOp.apply("rms_norm_backward", dy, x, ctx.normalized_shape, rstd, weight, mask,
                                        _strategy_for_backward(ctx))
        return dx, None, dweight, None

    @staticmethod
    def vmap(info, in_dims, x, normalized_shape, weight, eps):
        return _vmap_forward(RmsNorm, info, in_dims, x, normalized_shape, (weight,), eps)


def composite(op, x, normalized_shape, params, eps):
    """The norm from differentiable ATen ops, as python/csrc/autograd.cpp's CompositeRows computes it (float32
    terms for 16-bit x, the output cast to x's dtype), after the ops' own checks (same messages). For
    torch.compile over a transform (functional.py's _compiling_under_transform): Dynamo hides the transform
    from the ops' dispatch, so neither their C++ autograd nor the Functions above trace correctly there,
    while these ATen ops do (as torch.nn.functional's norms); Inductor then generates the norm's kernels.
    op: "layer_norm" or "rms_norm"; params: (("weight", w), ("bias", b)) as present for the op; eps None: the
    ops' default, the epsilon of the precision they compute in (float64 rows: float64, else float32)."""
    k = _check_common(f"{op}_forward", x, normalized_shape, params, _raise_unless)
    if eps is None:
        eps = torch.finfo(_stats_dtype(x)).eps
    # comparisons rather than math.isfinite: under dynamic=True Dynamo traces eps as a symbolic float
    # (a NaN fails eps >= 0)
    _raise_unless(eps >= 0 and eps != math.inf,
                  lambda: f"normkit.{op}_forward: argument 'eps' is {eps}, expected a finite value >= 0")
    axes = tuple(range(x.dim() - k, x.dim()))
    narrow = x.dtype in (torch.float16, torch.bfloat16)
    wide = (lambda t: t.float()) if narrow else (lambda t: t)  # noqa: E731
    xf = wide(x)
    centred = xf if op == "rms_norm" else xf - xf.mean(axes, keepdim=True)
    y = centred * torch.rsqrt(centred.square().mean(axes, keepdim=True) + eps)
    weight, bias = (dict(params).get(name) for name in ("weight", "bias"))
    if weight is not None:
        y = y * wide(weight)
    if bias is not None:
        y = y + wide(bias)
    return y.to(x.dtype)
