"""Functional forms with the signatures of torch.nn.functional.layer_norm / rms_norm."""
import numbers
from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor

_ShapeLike = Union[int, Sequence[int], torch.Size]


def _shape(normalized_shape: _ShapeLike) -> List[int]:
    if isinstance(normalized_shape, numbers.Integral):
        return [int(normalized_shape)]
    return list(normalized_shape)


def layer_norm(input: Tensor, normalized_shape: _ShapeLike, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Like torch.nn.functional.layer_norm, on normkit's kernels.

    CUDA float32/float16/bfloat16 run normkit's kernels; CPU tensors and float64 run its float64
    reference. weight/bias may be float32 with float16/bfloat16 input (ATen requires equal dtypes);
    the output has the input's dtype. Differentiable once (double backward raises RuntimeError).
    """
    return torch.ops.normkit.layer_norm_forward(input, _shape(normalized_shape), weight, bias, float(eps))[0]


def rms_norm(input: Tensor, normalized_shape: _ShapeLike, weight: Optional[Tensor] = None,
             eps: Optional[float] = None) -> Tensor:
    """Like torch.nn.functional.rms_norm, on normkit's kernels; eps=None means
    torch.finfo(input.dtype).eps. Same devices, dtypes and autograd as layer_norm."""
    return torch.ops.normkit.rms_norm_forward(input, _shape(normalized_shape), weight,
                                              None if eps is None else float(eps))[0]
