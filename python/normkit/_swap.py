"""normkit.swap_norms: replace norm modules of a model in place, keeping their Parameters."""
import warnings
from typing import Callable, Dict, Mapping, Optional, Type

import torch

from . import nn as _nn


def default_mapping() -> Dict[type, type]:
    return {torch.nn.LayerNorm: _nn.LayerNorm, torch.nn.RMSNorm: _nn.RMSNorm}


def _build(target, module, check):
    if isinstance(target, type) and issubclass(target, (_nn.LayerNorm, _nn.RMSNorm)):
        return target.from_module(module, check=check)
    if hasattr(target, "from_module"):
        return target.from_module(module)
    return target(module)


def _unmapped_norm_classes(model, table):
    """The classes of `model`'s modules that look like a LayerNorm / RMSNorm -- the name, a weight, an eps
    or variance_epsilon, e.g. Hugging Face's LlamaRMSNorm or T5LayerNorm -- that swap_norms leaves alone:
    not torch's (or a subclass of them: a deliberate choice), not in the mapping."""
    found = []
    for module in model.modules():
        cls = type(module)
        if cls in table or cls in found or isinstance(module, (torch.nn.LayerNorm, torch.nn.RMSNorm)):
            continue
        if cls.__name__.endswith(("LayerNorm", "RMSNorm")) and hasattr(module, "weight") and \
                (hasattr(module, "eps") or hasattr(module, "variance_epsilon")):
            found.append(cls)
    return found


def swap_norms(model: torch.nn.Module, mapping: Optional[Mapping[type, Callable]] = None, check: bool = True) -> int:
    """Replace every torch.nn.LayerNorm / torch.nn.RMSNorm inside `model` by normkit.nn.LayerNorm /
    normkit.nn.RMSNorm, in place, and return how many modules were replaced.

    The new modules hold the very same Parameter objects (optimizers, tied weights, FSDP/DDP
    bookkeeping that refer to them stay valid), the same eps and normalized_shape, the same
    training flag, the same state_dict keys and the same hooks (forward, backward, state_dict; the
    handles made on the original still remove them). Matching is on the exact class, so user subclasses
    with their own forward are left alone unless listed in `mapping`; a module shared by several
    parents is replaced by one shared normkit module.

    Modules that look like norms of another class (the name ends in LayerNorm / RMSNorm, with a weight
    and an eps or variance_epsilon: Hugging Face's LlamaRMSNorm, T5LayerNorm, ...) are left alone with a
    UserWarning naming them, so that a model whose norms were not swapped does not pass unnoticed.

    mapping: extra (or overriding) {source class: target} entries, e.g.
        {LlamaRMSNorm: normkit.nn.RMSNorm}. A target with a `from_module` classmethod (both
        normkit.nn classes) is called as target.from_module(module); any other callable as
        target(module). normkit.nn.*.from_module reads: `weight` (Parameter or None), `bias`
        (LayerNorm only), the epsilon from `eps` or else `variance_epsilon` (Hugging Face's name),
        and `normalized_shape` or else the weight's shape.
    check: for mapped classes other than torch's, normkit.nn.*.from_module compares the module's
        forward with the replacement's on a small probe and raises ValueError where they differ (a
        forward that computes something else with the same attributes, e.g. Gemma's RMSNorm, which
        scales by 1 + weight); check=False replaces them unchecked. A callable target is the caller's.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"normkit.swap_norms: argument 'model' is a {type(model).__name__}, expected a torch.nn.Module")
    table: Dict[type, Callable] = default_mapping()
    if mapping:
        for source, target in mapping.items():
            if not isinstance(source, type):
                raise TypeError(f"normkit.swap_norms: mapping key {source!r} is not a class")
            table[source] = target
    if type(model) in table:
        raise ValueError(f"normkit.swap_norms: the model itself is a {type(model).__name__}; swap_norms replaces "
                         f"submodules in place. Use normkit.nn.LayerNorm/RMSNorm.from_module(model) instead.")
    left = _unmapped_norm_classes(model, table)
    if left:
        names = ", ".join(cls.__name__ for cls in left)
        example = "RMSNorm" if left[0].__name__.endswith("RMSNorm") else "LayerNorm"
        warnings.warn(f"normkit.swap_norms: leaves {names} alone (not torch.nn.LayerNorm / RMSNorm). If their forward "
                      f"is a plain norm, pass mapping={{{left[0].__name__}: normkit.nn.{example}, ...}}: each mapped "
                      f"module is compared with normkit's on a probe before it is replaced.", stacklevel=2)
    replaced: Dict[int, torch.nn.Module] = {}
    for parent in list(model.modules()):
        for name, child in list(parent._modules.items()):
            if child is None:
                continue
            target = table.get(type(child))
            if target is None:
                continue
            new = replaced.get(id(child))
            if new is None:
                new = _build(target, child, check)
                replaced[id(child)] = new
            parent._modules[name] = new
    return len(replaced)
