"""Functional forms with the signatures of torch.nn.functional.layer_norm / rms_norm."""
import numbers
from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor
from torch.overrides import has_torch_function_variadic

from . import _C

_ShapeLike = Union[int, Sequence[int], torch.Size]


def _shape(normalized_shape: _ShapeLike) -> List[int]:
    if isinstance(normalized_shape, numbers.Integral):
        return [int(normalized_shape)]
    return list(normalized_shape)


def _eager(input, weight, bias=None) -> bool:
    """Whether the call may take _C's unboxed entry point instead of torch.ops.normkit.*: a plain
    tensor input, outside torch.compile / export (which trace the torch.ops call) and without a
    __torch_function__ override or mode (which torch.ops honours). Both reach the same op through the
    dispatcher (autograd, dispatch modes, fake tensors alike); the boxed torch.ops call costs ~1.9 us
    more per call (docs/NOTES.md entry 79)."""
    return (type(input) is torch.Tensor and not torch.compiler.is_compiling()
            and not has_torch_function_variadic(input, weight, bias))


def layer_norm(input: Tensor, normalized_shape: _ShapeLike, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Like torch.nn.functional.layer_norm, on normkit's kernels.

    CUDA float32/float16/bfloat16 run normkit's kernels; CPU tensors and float64 run its float64
    reference. weight/bias may be float32 with float16/bfloat16 input (ATen requires equal dtypes);
    the output has the input's dtype. Differentiable once (double backward raises RuntimeError).
    """
    if _eager(input, weight, bias):
        return _C._layer_norm(input, _shape(normalized_shape), weight, bias, float(eps))
    return torch.ops.normkit.layer_norm_forward(input, _shape(normalized_shape), weight, bias, float(eps))[0]


def rms_norm(input: Tensor, normalized_shape: _ShapeLike, weight: Optional[Tensor] = None,
             eps: Optional[float] = None) -> Tensor:
    """Like torch.nn.functional.rms_norm, on normkit's kernels; eps=None means
    torch.finfo(input.dtype).eps. Same devices, dtypes and autograd as layer_norm."""
    eps = None if eps is None else float(eps)
    if _eager(input, weight):
        return _C._rms_norm(input, _shape(normalized_shape), weight, eps)
    return torch.ops.normkit.rms_norm_forward(input, _shape(normalized_shape), weight, eps)[0]
