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


# torch.nn.Module's per-module hook tables (its __init__). from_module hands them to the replacement by
# reference: hooks registered on the original (activation capture, monitoring, a quantizer's
# observers) keep running on the replacement, and their handles still remove them.
_HOOK_TABLES = ("_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook", "_forward_hooks",
                "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
                "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
                "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")


def _carry_hooks(module, new):
    for name in _HOOK_TABLES:
        if name in module.__dict__:
            new.__dict__[name] = module.__dict__[name]


def _replace(new, name, value):
    """Install `value` (the very same Parameter object, or None) as parameter `name` of `new`."""
    new.register_parameter(name, value)


# Relative L2 difference between a foreign module's output and normkit's on the probe that still counts
# as the same function: both round differently (Hugging Face's LlamaRMSNorm rounds x * rstd to the input
# dtype before the weight), so the bounds sit a few times above the rounding of each dtype; a different
# function (Gemma's RMSNorm scales by 1 + weight, a subclass that doubles its output) differs by O(1).
_SAME_FUNCTION_RTOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _check_same_function(module, new):
    """Raise ValueError unless `module`'s forward computes what `new` (the normkit module built from its
    parameters) computes, on a fixed random probe of 4 rows on the parameters' device and dtype.

    Only for classes other than torch's and normkit's own (those are the same function by construction):
    swap_norms' `mapping` and from_module take any class with the attribute convention, and nothing in
    the attributes says what its forward does with them. The module's forward is called directly (no
    hooks run) under no_grad; a module on the meta device has no values to compare and is not checked."""
    if type(module) in (torch.nn.LayerNorm, torch.nn.RMSNorm, LayerNorm, RMSNorm):
        return
    ref_param = next((p for p in (new.weight, getattr(new, "bias", None)) if p is not None), None)
    device = ref_param.device if ref_param is not None else torch.device("cpu")
    dtype = ref_param.dtype if ref_param is not None and ref_param.is_floating_point() else torch.float32
    if device.type == "meta":
        return
    generator = torch.Generator().manual_seed(0x6e6b)  # a fixed probe; the global RNG is left alone
    probe = torch.randn((4,) + tuple(new.normalized_shape), generator=generator).to(device=device, dtype=dtype)
    name = type(module).__name__
    with torch.no_grad():
        try:
            theirs = type(module).forward(module, probe)
        except Exception as exc:  # noqa: BLE001 (any failure means: not comparable)
            raise ValueError(f"normkit: cannot compare {name} with normkit.nn.{type(new).__name__}: its forward "
                             f"raised {type(exc).__name__}: {exc}. Pass check=False to replace it unchecked.") from exc
        ours = new.forward(probe)
    if not isinstance(theirs, torch.Tensor) or theirs.shape != ours.shape:
        raise ValueError(f"normkit: {name}.forward does not return a tensor of the input's shape; it is not a "
                         f"{type(new).__name__}. Pass check=False to replace it unchecked.")
    diff = torch.linalg.vector_norm((theirs.double() - ours.double()).flatten())
    scale = torch.linalg.vector_norm(ours.double().flatten())
    rel = float(diff / scale) if float(scale) > 0 else float(diff)
    bound = _SAME_FUNCTION_RTOL.get(dtype, 1e-4)
    if not rel <= bound:  # (NaN fails too)
        raise ValueError(f"normkit: {name}.forward computes something else than normkit.nn.{type(new).__name__} "
                         f"with its parameters (relative L2 difference {rel:.3g} on a {dtype} probe, more than "
                         f"{bound:g}); e.g. Gemma's RMSNorm scales by 1 + weight. Replacing it would change the "
                         f"model's outputs. Pass check=False to replace it anyway.")


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm whose forward runs normkit.layer_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # TorchScript compiles this branch only: the op, whose autograd is C++'s
            return torch.ops.normkit.layer_norm_forward(input, list(self.normalized_shape), self.weight, self.bias,
                                                        self.eps)[0]
        else:
            return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    @classmethod
    def from_module(cls, module: torch.nn.Module, check: bool = True) -> "LayerNorm":
        """A normkit LayerNorm sharing `module`'s Parameter objects (no copy) and its hooks (the same hook
        tables: handles made on `module` remove them from the new module).

        Convention for other classes: `weight` (Parameter or None), optional `bias`, epsilon in
        `eps` or `variance_epsilon`, and `normalized_shape` (or the weight's shape). For classes other
        than torch.nn.LayerNorm, `check` compares `module`'s forward with the new module's on a small
        probe and raises ValueError where they differ (a forward that does more than LayerNorm)."""
        weight, bias = _param(module, "weight"), _param(module, "bias")
        shape = _normalized_shape(module, weight)
        affine = weight is not None or bias is not None
        new = cls(shape, eps=_eps(module, 1e-5), elementwise_affine=affine, bias=bias is not None, device="meta")
        if affine:
            _replace(new, "weight", weight)
            _replace(new, "bias", bias)
        new.train(module.training)
        if check:
            _check_same_function(module, new)
        _carry_hooks(module, new)
        return new


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm whose forward runs normkit.rms_norm (eps=None: as torch's, float32's epsilon for
    16-bit and float32 input)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # as LayerNorm.forward
            return torch.ops.normkit.rms_norm_forward(input, list(self.normalized_shape), self.weight, self.eps)[0]
        else:
            return rms_norm(input, self.normalized_shape, self.weight, self.eps)

    @classmethod
    def from_module(cls, module: torch.nn.Module, check: bool = True) -> "RMSNorm":
        """A normkit RMSNorm sharing `module`'s weight Parameter (no copy) and its hooks, as LayerNorm's.

        Convention for other classes (e.g. Hugging Face LlamaRMSNorm): `weight` (Parameter or None),
        epsilon in `eps` or `variance_epsilon`, and `normalized_shape` (or the weight's shape). A
        module with a `bias` parameter is not an RMSNorm and is refused. For classes other than
        torch.nn.RMSNorm, `check` compares `module`'s forward with the new module's on a small probe
        and raises ValueError where they differ (e.g. Gemma's RMSNorm, which scales by 1 + weight)."""
        if getattr(module, "bias", None) is not None:
            raise ValueError(f"normkit: {type(module).__name__} has a bias; RMSNorm has none")
        weight = _param(module, "weight")
        shape = _normalized_shape(module, weight)
        new = cls(shape, eps=_eps(module, None), elementwise_affine=weight is not None, device="meta")
        if weight is not None:
            _replace(new, "weight", weight)
        new.train(module.training)
        if check:
            _check_same_function(module, new)
        _carry_hooks(module, new)
        return new
