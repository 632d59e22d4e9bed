"""normkit.layer_norm / rms_norm (and the modules) on DTensor inputs, as ATen's norms take them.

Where they come in: tensor parallelism with sequence parallelism (torch.distributed.tensor.parallel's
SequenceParallel, as torchtitan applies it to the norms) hands a norm module a DTensor sharded along the
sequence, with its weight and bias replicated DTensors. The ops have no DTensor sharding rule (DTensor
would raise "does not have a sharding strategy registered"), and none can be written for the backward
ops: DTensor takes an op's outputs for a tuple of tensors only when the first return is a plain
`Tensor`, and normkit's backward returns `Tensor?` (a masked gradient is None). So the functional forms
do what a rule would, around the plain-tensor call:

  - rows are normalized independently: x keeps its shards on leading (not normalized) dims and is
    gathered on the others (a shard of a normalized dim, or a Partial: a norm of a sum is not the sum of
    norms); y comes back with x's resulting placements;
  - the weight and bias are used whole (replicated; a sharded one is gathered); their gradients are each
    rank's partial sums over its rows, so they leave as Partial on the mesh dims that shard the rows
    (DTensor adds them, or reduce-scatters them back into a sharded parameter).
Autograd runs through DTensor's own to_local / from_local, and normkit's ops on the local tensors.
"""
import sys

import torch


def dtensor_type():
    """DTensor's class when torch.distributed.tensor is loaded, else None (never imported here: it costs
    ~0.35 s, which programs without DTensor should not pay at `import normkit`)."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def any_dtensor(*tensors) -> bool:
    cls = dtensor_type()
    return cls is not None and any(isinstance(t, cls) for t in tensors)


def _global_contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def norm(local_norm, op, x, normalized_shape, params):
    """Apply `local_norm(x_local, *params_local)` (normkit's norm on plain tensors) to DTensor x and
    params (weight[, bias], each None or a DTensor), as the module docstring says."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    present = [p for p in params if p is not None]
    if not isinstance(x, DTensor) or not all(isinstance(p, DTensor) for p in present):
        kinds = ", ".join(f"{name} {type(t).__name__}" for name, t in
                          zip(("x", "weight", "bias"), (x,) + tuple(params)) if t is not None)
        raise RuntimeError(f"normkit.{op}: got mixed torch.Tensor and DTensor arguments ({kinds}); convert them "
                           f"all to DTensor (e.g. DTensor.from_local or distribute_tensor) on one mesh")
    mesh = x.device_mesh
    for p in present:
        if p.device_mesh != mesh:
            raise RuntimeError(f"normkit.{op}: the weight / bias DTensors are on another device mesh than 'x'")
    leading = x.ndim - len(normalized_shape)
    rows = tuple(p if isinstance(p, Shard) and p.dim < leading else Replicate() for p in x.placements)
    if rows != tuple(x.placements):
        x = x.redistribute(mesh, rows)
    # the parameters' gradients: partial sums over the ranks that hold different rows
    grad_placements = tuple(Partial() if isinstance(p, Shard) else Replicate() for p in rows)
    whole = (Replicate(),) * mesh.ndim
    local_params = [None if p is None else
                    (p if tuple(p.placements) == whole else p.redistribute(mesh, whole)).to_local(
                        grad_placements=grad_placements)
                    for p in params]
    y = local_norm(x.to_local(), *local_params)
    return DTensor.from_local(y, mesh, rows, run_check=False, shape=x.shape,
                              stride=_global_contiguous_strides(x.shape))
