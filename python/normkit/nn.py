"""Drop-in modules: the constructor arguments, parameters and state_dict keys of
torch.nn.LayerNorm / torch.nn.RMSNorm (they subclass them), with forward on normkit's kernels."""
import numbers

import torch

from .functional import layer_norm, rms_norm

__all__ = ["LayerNorm", "RMSNorm"]


def _param(module, name):
    value = getattr(module, name, None)
    if value is not None and not isinstance(value, torch.nn.Parameter):
        raise TypeError(f"normkit: {type(module).__name__}.{name} is a {type(value).__name__}, expected a "
                        f"torch.nn.Parameter or None")
    return value


def _eps(module, default):
    for name in ("eps", "variance_epsilon"):
        if hasattr(module, name):
            return getattr(module, name)
    return default


def _normalized_shape(module, weight):
    shape = getattr(module, "normalized_shape", None)
    if shape is not None:
        return (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    if weight is None:
        raise ValueError(f"normkit: cannot tell the normalized shape of {type(module).__name__}: it has neither "
                         f"'normalized_shape' nor a 'weight'")
    return tuple(weight.shape)


def _replace(new, name, value):
    """Install `value` (the very same Parameter object, or None) as parameter `name` of `new`."""
    new.register_parameter(name, value)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm whose forward runs normkit.layer_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    @classmethod
    def from_module(cls, module: torch.nn.Module) -> "LayerNorm":
        """A normkit LayerNorm sharing `module`'s Parameter objects (no copy).

        Convention for other classes: `weight` (Parameter or None), optional `bias`, epsilon in
        `eps` or `variance_epsilon`, and `normalized_shape` (or the weight's shape)."""
        weight, bias = _param(module, "weight"), _param(module, "bias")
        shape = _normalized_shape(module, weight)
        affine = weight is not None or bias is not None
        new = cls(shape, eps=_eps(module, 1e-5), elementwise_affine=affine, bias=bias is not None, device="meta")
        if affine:
            _replace(new, "weight", weight)
            _replace(new, "bias", bias)
        new.train(module.training)
        return new


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm whose forward runs normkit.rms_norm (eps=None: finfo(input.dtype).eps)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return rms_norm(input, self.normalized_shape, self.weight, self.eps)

    @classmethod
    def from_module(cls, module: torch.nn.Module) -> "RMSNorm":
        """A normkit RMSNorm sharing `module`'s weight Parameter (no copy).

        Convention for other classes (e.g. Hugging Face LlamaRMSNorm): `weight` (Parameter or None),
        epsilon in `eps` or `variance_epsilon`, and `normalized_shape` (or the weight's shape). A
        module with a `bias` parameter is not an RMSNorm and is refused."""
        if getattr(module, "bias", None) is not None:
            raise ValueError(f"normkit: {type(module).__name__} has a bias; RMSNorm has none")
        weight = _param(module, "weight")
        shape = _normalized_shape(module, weight)
        new = cls(shape, eps=_eps(module, None), elementwise_affine=weight is not None, device="meta")
        if weight is not None:
            _replace(new, "weight", weight)
        new.train(module.training)
        return new
