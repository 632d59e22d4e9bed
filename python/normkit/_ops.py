"""Fake (meta) kernels of torch.ops.normkit.*, the backward-strategy switch, and the raising
autograd of the backward ops.

The CPU/CUDA kernels and the schemas are registered in C++ (python/csrc/ops.cpp), and so is the
autograd of the forward ops (python/csrc/autograd.cpp: forward ops -> their backward ops, so
normkit.layer_norm / rms_norm differentiate like F.layer_norm / F.rms_norm; in C++ because the
Python registration cost ~110 us of host time per forward + backward). Here:
  * register_fake: output shapes/dtypes for FakeTensor tracing (torch.compile, export, meta);
  * backward_strategy(): the strategy the C++ autograd passes to the backward ops;
  * the backward ops get an autograd formula that raises: they have no derivative of their own, and
    without it PyTorch would only warn and silently return wrong (missing) second derivatives. (A
    create_graph backward through normkit.layer_norm / rms_norm does not call them: autograd.cpp
    recomputes the forward with differentiable ATen ops there.)
"""
import contextlib

import torch

from . import _C

_SUPPORTED = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_STRATEGIES = ("auto", "simple", "tiled", "two_pass", "fused")

# ---------------------------------------------------------------------------------------------
# backward strategy used by autograd (normkit.layer_norm / rms_norm / nn modules)
# ---------------------------------------------------------------------------------------------

def get_backward_strategy() -> str:
    """The gamma/beta strategy autograd passes to the backward ops ("auto" unless overridden)."""
    return _C._backward_strategy() or "auto"


@contextlib.contextmanager
def backward_strategy(name: str):
    """Force the backward strategy ("auto", "simple", "tiled", "two_pass", "fused") of every
    normkit backward that autograd runs inside the block (on this thread). A strategy that cannot
    serve a shape raises RuntimeError; normkit never substitutes another one silently.

    Eager mode: a backward uses the block active on the thread that runs it, else the block that was
    active when its forward ran (autograd runs CUDA backwards on its own device thread, so for CUDA
    tensors put the forward inside the block). torch.compile: the strategy is read when the graphs
    are traced (usually the first call) and stays baked into them.
    """
    if name not in _STRATEGIES:
        raise ValueError(f"normkit.backward_strategy: strategy {name!r} is not one of {', '.join(_STRATEGIES)}")
    previous = _C._set_backward_strategy(name)  # None: no block was active on this thread
    try:
        yield
    finally:
        _C._set_backward_strategy(previous)


# ---------------------------------------------------------------------------------------------
# fake kernels
# ---------------------------------------------------------------------------------------------

def _check_device(op, x, name, t, check=torch._check):
    """ops.cpp's check_tensor: every tensor of a call on x's device. The dispatcher runs these fake
    kernels whenever one argument is a meta tensor, so without this a meta weight next to a CPU x
    returned uninitialised memory instead of the error the CPU op gives."""
    check(t.device == x.device,
          lambda: f"normkit.{op}: argument '{name}' is on {t.device} but 'x' is on {x.device}")


def _raise_unless(condition, message):
    """torch._check's contract as a plain raise, for checks that Dynamo traces (it refuses torch._check whose
    message is a closure): _functorch.composite."""
    if not condition:
        raise RuntimeError(message())


def _check_common(op, x, normalized_shape, params, check=torch._check):
    """The forward ops' argument checks with ops.cpp's messages; returns len(normalized_shape). `check` is
    torch._check in the fake kernels and _raise_unless where Dynamo traces them (_functorch.composite)."""
    check(x.dtype in _SUPPORTED,
          lambda: f"normkit.{op}: argument 'x' has dtype {x.dtype}, expected float32, float16, bfloat16 or float64")
    k = len(normalized_shape)
    check(k >= 1, lambda: f"normkit.{op}: argument 'normalized_shape' is empty, expected at least one dimension")
    check(x.dim() >= k,
          lambda: f"normkit.{op}: argument 'normalized_shape' {list(normalized_shape)} has {k} dimensions "
                  f"but 'x' has only {x.dim()}")
    for i, size in enumerate(normalized_shape):
        check(x.shape[x.dim() - k + i] == size,
              lambda: f"normkit.{op}: argument 'normalized_shape' is {list(normalized_shape)}, expected the "
                      f"trailing dimensions of 'x' (shape {list(x.shape)})")
    owner = None  # the first parameter sets the dtype of the others (ops.cpp, check_params)
    for name, p in params:
        if p is None:
            continue
        _check_device(op, x, name, p, check)
        check(p.dim() == k and all(a == b for a, b in zip(p.shape, normalized_shape)),
              lambda: f"normkit.{op}: argument '{name}' has shape {list(p.shape)}, expected normalized_shape "
                      f"{list(normalized_shape)}")
        if owner is None:
            check(p.dtype in (x.dtype, torch.float32),
                  lambda: f"normkit.{op}: argument '{name}' has dtype {p.dtype}, expected {x.dtype} (the dtype "
                          f"of 'x')" + ("" if x.dtype == torch.float32 else " or torch.float32"))
            owner = (name, p.dtype)
        else:
            check(p.dtype == owner[1],
                  lambda: f"normkit.{op}: argument '{name}' has dtype {p.dtype}, expected {owner[1]} (the dtype "
                          f"of '{owner[0]}')")
    return k


def _check_backward(op, grad_out, x, k, stats, strategy):
    """The backward ops' own checks (ops.cpp: check_grad_out, check_stats, the strategy's name), with the
    same messages, so that a traced graph fails where the op would."""
    _check_device(op, x, "grad_out", grad_out)
    for name, t in stats:
        _check_device(op, x, name, t)
    torch._check(grad_out.shape == x.shape,
                 lambda: f"normkit.{op}: argument 'grad_out' has shape {list(grad_out.shape)}, expected the shape of "
                         f"'x' {list(x.shape)}")
    torch._check(grad_out.dtype == x.dtype,
                 lambda: f"normkit.{op}: argument 'grad_out' has dtype {grad_out.dtype}, expected {x.dtype} (the "
                         f"dtype of 'x')")
    rows = 1
    for size in x.shape[: x.dim() - k]:
        rows = rows * size
    stat_dtype = _stats_dtype(x)
    for name, t in stats:
        torch._check(t.numel() == rows,
                     lambda: f"normkit.{op}: argument '{name}' has {t.numel()} elements (shape {list(t.shape)}), "
                             f"expected one per row, M = {rows}")
        torch._check(t.dtype == stat_dtype,
                     lambda: f"normkit.{op}: argument '{name}' has dtype {t.dtype}, expected {stat_dtype} (the "
                             f"statistics of {x.dtype} 'x')")
    torch._check(strategy in _STRATEGIES,
                 lambda: f"normkit: argument 'strategy' is \"{strategy}\", expected one of {', '.join(_STRATEGIES)}")


def _stats_dtype(x):
    """mean / rstd are float64 for float64 rows, else float32 (the ops' statistics)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _stats(x, k):
    dtype = _stats_dtype(x)
    return x.new_empty((*x.shape[: x.dim() - k], *([1] * k)), dtype=dtype)


@torch.library.register_fake("normkit::layer_norm_forward")
def _layer_norm_forward_fake(x, normalized_shape, weight, bias, eps):
    k = _check_common("layer_norm_forward", x, normalized_shape, (("weight", weight), ("bias", bias)))
    return x.new_empty(x.shape), _stats(x, k), _stats(x, k)


@torch.library.register_fake("normkit::layer_norm_backward")
def _layer_norm_backward_fake(grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask, strategy="auto"):
    k = _check_common("layer_norm_backward", x, normalized_shape, (("weight", weight), ("bias", bias)))
    _check_backward("layer_norm_backward", grad_out, x, k, (("mean", mean), ("rstd", rstd)), strategy)
    dx = x.new_empty(x.shape) if output_mask[0] else None
    dweight = weight.new_empty(tuple(normalized_shape)) if (output_mask[1] and weight is not None) else None
    dbias = None
    if output_mask[2]:
        dtype = bias.dtype if bias is not None else weight.dtype if weight is not None else x.dtype
        dbias = x.new_empty(tuple(normalized_shape), dtype=dtype)
    return dx, dweight, dbias


@torch.library.register_fake("normkit::rms_norm_forward")
def _rms_norm_forward_fake(x, normalized_shape, weight, eps):
    k = _check_common("rms_norm_forward", x, normalized_shape, (("weight", weight),))
    return x.new_empty(x.shape), _stats(x, k)


@torch.library.register_fake("normkit::rms_norm_backward")
def _rms_norm_backward_fake(grad_out, x, normalized_shape, rstd, weight, output_mask, strategy="auto"):
    k = _check_common("rms_norm_backward", x, normalized_shape, (("weight", weight),))
    _check_backward("rms_norm_backward", grad_out, x, k, (("rstd", rstd),), strategy)
    dx = x.new_empty(x.shape) if output_mask[0] else None
    dweight = weight.new_empty(tuple(normalized_shape)) if (output_mask[1] and weight is not None) else None
    return dx, dweight


# ---------------------------------------------------------------------------------------------
# autograd of the backward ops: none (double backward raises)
# ---------------------------------------------------------------------------------------------

_DOUBLE_BACKWARD = ("normkit: double backward is not supported: {op} has no derivative of its own. "
                    "Differentiate a torch.nn.functional norm instead when second derivatives are needed "
                    "(e.g. gradient penalties, Hessian-vector products).")


def _no_setup(ctx, inputs, output):
    pass


def _layer_norm_double_backward(ctx, *grads):
    raise RuntimeError(_DOUBLE_BACKWARD.format(op="normkit::layer_norm_backward"))


def _rms_norm_double_backward(ctx, *grads):
    raise RuntimeError(_DOUBLE_BACKWARD.format(op="normkit::rms_norm_backward"))


torch.library.register_autograd("normkit::layer_norm_backward", _layer_norm_double_backward,
                                setup_context=_no_setup)
torch.library.register_autograd("normkit::rms_norm_backward", _rms_norm_double_backward,
                                setup_context=_no_setup)
