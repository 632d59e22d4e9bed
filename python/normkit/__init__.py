"""normkit: LayerNorm and RMSNorm kernels with PyTorch semantics.

    import normkit
    y = normkit.layer_norm(x, (hidden,), weight, bias, eps=1e-5)   # like F.layer_norm
    y = normkit.rms_norm(x, (hidden,), weight)                     # like F.rms_norm
    normkit.swap_norms(model)      # torch.nn.LayerNorm / RMSNorm -> normkit.nn.*, same Parameters

The operators live in ``torch.ops.normkit``: layer_norm_forward, layer_norm_backward,
rms_norm_forward, rms_norm_backward (with fake kernels and autograd, so torch.compile(fullgraph=True)
traces them), plus the planner queries plan_backward and strategy_supported.
"""
import torch

from . import _C  # noqa: F401  (registers torch.ops.normkit.*)
from . import _ops  # noqa: F401  (fake kernels + autograd)
from ._ops import backward_strategy, get_backward_strategy
from .functional import layer_norm, rms_norm
from . import nn
from ._swap import swap_norms

__version__ = "0.1.0"


def built_with_cuda() -> bool:
    """Whether this build carries the CUDA kernels (False: CPU-only build)."""
    return bool(_C.built_with_cuda())


def cuda_available() -> bool:
    """Whether normkit's CUDA layer sees a device."""
    return bool(_C.cuda_available())


def plan_backward(op, M, N, dtype, mask=(True, True, True), strategy="auto", weight_dtype=None) -> str:
    """The backward plan normkit would run for op ("layer_norm" / "rms_norm") on M rows of N
    elements of `dtype`, as Plan::describe() spells it, e.g. "tiled Tile-256 ..." or
    "two_pass parts=33 ...". Planned for the current CUDA device, or for the H200 without one.
    A forced `strategy` that cannot serve the shape raises RuntimeError saying why."""
    return torch.ops.normkit.plan_backward(op, int(M), int(N), dtype, list(mask), strategy, weight_dtype)


def strategy_supported(op, M, N, dtype, mask=(True, True, True), strategy="auto", weight_dtype=None):
    """(supported, why_not): whether a forced backward `strategy` can serve the shape."""
    ok, why = torch.ops.normkit.strategy_supported(op, int(M), int(N), dtype, list(mask), strategy, weight_dtype)
    return bool(ok), why


def planner_table() -> str:
    """Which planner table normkit plans with on the current CUDA device (the H200's without one): the
    file NORMKIT_PLANNER_TABLE names, or "built-in (H100 SXM)" / "built-in (H200)". The H100 SXM has
    a built-in table of its own; every other GPU plans with the H200's (`normkit-bench --tune FILE`
    measures one for it). A table file that does not load raises RuntimeError naming its line."""
    return str(_C._planner_table())


STRATEGIES = ("auto", "simple", "tiled", "two_pass", "fused")

__all__ = [
    "layer_norm", "rms_norm", "nn", "swap_norms", "plan_backward", "strategy_supported", "planner_table",
    "backward_strategy", "get_backward_strategy", "built_with_cuda", "cuda_available", "STRATEGIES",
]
