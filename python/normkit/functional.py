"""Functional forms with the signatures of torch.nn.functional.layer_norm / rms_norm."""
import numbers
from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor
from torch.overrides import has_torch_function_variadic

from . import _C, _dtensor, _functorch

_ShapeLike = Union[int, Sequence[int], torch.Size]


def _shape(normalized_shape: _ShapeLike) -> List[int]:
    if isinstance(normalized_shape, numbers.Integral):
        return [int(normalized_shape)]
    return list(normalized_shape)


_is_compiling = torch.compiler.is_compiling
_transform_running = torch._C._functorch.peek_interpreter_stack  # not None while a torch.func transform runs


def _eager(input, weight, bias=None) -> bool:
    """Whether a call takes _C's unboxed entry point: the same op through the dispatcher (autograd,
    dispatch modes, fake tensors alike), ~1.9 us less per call than the boxed torch.ops call (docs/NOTES.md
    entry 79). Not under torch.compile / export (they trace the torch.ops call), nor under a torch.func
    transform (it refuses the ops' C++ autograd: _functorch.py), nor for an input that is not a plain
    tensor or a __torch_function__ override or mode (torch.ops honours them)."""
    return (type(input) is torch.Tensor and not _is_compiling() and _transform_running() is None
            and not has_torch_function_variadic(input, weight, bias))


_FUNCTIONALIZE = torch._C._functorch.TransformType.Functionalize


def _under_transform() -> bool:
    """Whether a torch.func transform that needs _functorch.py's Functions runs (outside torch.compile, whose
    tracing reports one): grad, vjp, jacrev, jvp, vmap. functionalize alone takes the ops as they are (they
    are functional already; it does not support custom Functions)."""
    if _is_compiling() or _transform_running() is None:
        return False
    return any(level.key() != _FUNCTIONALIZE for level in torch._C._functorch.get_interpreter_stack())


def _compiling_under_transform() -> bool:
    """Whether torch.compile traces through a torch.func transform (compile(grad(f)), jacrev, vjp, vmap):
    there _under_transform cannot see the transform's levels (get_interpreter_stack does not trace), but
    peek_interpreter_stack does. The ops would meet their C++ autograd, which functorch refuses, and
    _functorch.py's Functions gave wrong gradients (Dynamo inlines their forward on the transform's
    tensors, docs/NOTES.md entry 87), so the norm is traced from ATen ops (_functorch.composite)."""
    # (Dynamo wraps peek_interpreter_stack()'s answer as an object even when it is None, so that `is None` is
    # always False while it traces; the answer's type is traced faithfully)
    return _is_compiling() and type(_transform_running()) is not type(None)


def layer_norm(input: Tensor, normalized_shape: _ShapeLike, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Like torch.nn.functional.layer_norm, on normkit's kernels.

    CUDA float32/float16/bfloat16 run normkit's kernels; CPU tensors and float64 run its float64
    reference. weight/bias may be float32 with float16/bfloat16 input (ATen requires equal dtypes);
    the output has the input's dtype. Differentiable twice through autograd (a create_graph backward
    recomputes the forward with ATen ops), once under torch.func transforms (grad, vjp, jacrev, vmap);
    torch.compile over a transform traces it from ATen ops (_compiling_under_transform)."""
    shape, eps = _shape(normalized_shape), float(eps)
    if _eager(input, weight, bias):
        return _C._layer_norm(input, shape, weight, bias, eps)
    if _dtensor.any_dtensor(input, weight, bias):  # on the local shards (_dtensor.py)
        return _dtensor.norm(lambda x, w, b: layer_norm(x, shape, w, b, eps), "layer_norm", input, shape,
                             (weight, bias))
    if _under_transform():
        return _functorch.LayerNorm.apply(input, shape, weight, bias, eps)[0]
    if _compiling_under_transform():
        return _functorch.composite("layer_norm", input, shape, (("weight", weight), ("bias", bias)), eps)
    return torch.ops.normkit.layer_norm_forward(input, shape, weight, bias, eps)[0]


def rms_norm(input: Tensor, normalized_shape: _ShapeLike, weight: Optional[Tensor] = None,
             eps: Optional[float] = None) -> Tensor:
    """Like torch.nn.functional.rms_norm, on normkit's kernels; eps=None means what ATen uses, float32's
    epsilon for float16 / bfloat16 / float32 input (float64's for float64). Same devices, dtypes and
    autograd as layer_norm."""
    shape, eps = _shape(normalized_shape), None if eps is None else float(eps)
    if _eager(input, weight):
        return _C._rms_norm(input, shape, weight, eps)
    if _dtensor.any_dtensor(input, weight):
        return _dtensor.norm(lambda x, w: rms_norm(x, shape, w, eps), "rms_norm", input, shape, (weight,))
    if _under_transform():
        return _functorch.RmsNorm.apply(input, shape, weight, eps)[0]
    if _compiling_under_transform():
        return _functorch.composite("rms_norm", input, shape, (("weight", weight),), eps)
    return torch.ops.normkit.rms_norm_forward(input, shape, weight, eps)[0]
