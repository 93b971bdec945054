"""fp8lm.torch: Transformer Engine's FP8 recipes inside your own PyTorch model, on CPU tensors.

    import fp8lm, fp8lm.torch
    model = fp8lm.torch.convert(model)              # torch.nn.Linear -> fp8lm.torch.Linear
    with fp8lm.torch.fp8_autocast(enabled=True, fp8_recipe=fp8lm.DelayedScaling()):
        loss = loss_fn(model(x), y)
    loss.backward()
    fp8lm.torch.fp8_state(model)                    # every module's scales and amax histories

Each fp8lm.torch.Linear runs its GEMMs through fp8lm's own Linear: inside an enabled
fp8_autocast its input and weight are quantized in forward and its output gradient in
backward, with the recipe's roles, formats and blocks, each module keeping its own scaling
state (TE's fp8_meta); forward slots update when the autocast scope closes, backward slots
after the module's backward, as TE updates them. Outside FP8 the GEMMs are FP32, or BF16
inside gemm_precision("bf16"). In FP8 a module keeps one forward for its backward: call
backward before running the same module again (no reuse within an FP8 step, no activation
recomputation); FP32 and BF16 forwards are recomputed when needed.
"""
import fnmatch
import itertools
import json
import math
from typing import Any, Dict, Optional, Sequence

import torch

from fp8lm import _fp8lm
from fp8lm.numerics import as_float32
from fp8lm.recipe import DelayedScaling, settings_of

_autocast_seeds = itertools.count(1)


class _Scope:
    """A `with` block around one of the engine's thread-wide scopes (self._scope)."""

    def __enter__(self):
        self._scope.enter()
        return self

    def __exit__(self, *exc):
        self._scope.exit()
        return False


class fp8_autocast(_Scope):
    """TE's fp8_autocast: inside it, fp8lm.torch.Linear modules run their GEMMs in FP8 with
    `fp8_recipe` (DelayedScaling() when None). Each scope draws NVFP4's stochastic rounding
    from a fresh seed unless `seed` is given."""

    def __init__(self, enabled: bool = True, fp8_recipe: Any = None,
                 seed: Optional[int] = None) -> None:
        self.enabled = bool(enabled)
        self.fp8_recipe = DelayedScaling() if fp8_recipe is None else fp8_recipe
        seed = next(_autocast_seeds) if seed is None else int(seed)
        self._scope = _fp8lm._AutocastScope(self.enabled, json.dumps(settings_of(self.fp8_recipe)),
                                            seed)


class gemm_precision(_Scope):
    """The precision of fp8lm.torch.Linear's GEMMs outside FP8: "fp32" (the default) or
    "bf16" (BF16 operands, FP32 accumulation), like torch.autocast's dtype."""

    def __init__(self, precision: str) -> None:
        self._scope = _fp8lm._GemmPrecisionScope(precision)


class _LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, module, training):
        y, ctx.forward_id = _run_forward(module, x, weight, bias, training)
        ctx.precision = module._impl.last_precision()
        ctx.module, ctx.x_shape, ctx.x_dtype = module, x.shape, x.dtype
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, weight, bias)
        return torch.from_numpy(y).reshape(*x.shape[:-1], module.out_features).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        module = ctx.module
        if module._impl.last_forward() != ctx.forward_id and ctx.precision != "fp8":
            # The module ran again since (torch.autograd.gradcheck, a model calling a layer
            # twice): an FP32 or BF16 forward is a function of its inputs alone, so it is run
            # again for this backward. An FP8 one also moved the scaling state: refused.
            x, weight, bias = ctx.saved_tensors
            with gemm_precision(ctx.precision):
                _, ctx.forward_id = _run_forward(module, x, weight, bias, True)
        dx, dw, db = module._impl.backward(as_float32(dy).reshape(-1, module.out_features),
                                           ctx.forward_id)
        dw = torch.from_numpy(dw)
        if module.weight_transposed:
            dw = dw.t()
        dx = torch.from_numpy(dx).reshape(ctx.x_shape).to(ctx.x_dtype)
        db = torch.from_numpy(db) if ctx.has_bias else None
        return dx, dw, db, None, None


def _run_forward(module, x, weight, bias, training):
    w = as_float32(weight)
    if module.weight_transposed:
        w = w.t().contiguous()
    b = None if bias is None else as_float32(bias)
    return module._impl.forward(as_float32(x).reshape(-1, module.in_features), w, b, training)


_linear_numbers = itertools.count()


class Linear(torch.nn.Module):
    """TE's Linear for CPU tensors: y = x Wᵀ + b, W [out_features, in_features], its GEMMs
    fp8lm's (FP8 inside fp8_autocast). Initialized as torch.nn.Linear is."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 name: Optional[str] = None) -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = torch.nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.bias = torch.nn.Parameter(torch.empty(self.out_features)) if bias else None
        # A Hugging Face Conv1D's weight is [in, out]; a converted one keeps it so.
        self.weight_transposed = False
        self.name = name or f"linear{next(_linear_numbers)}"
        self._impl = _fp8lm._Linear(self.name, self.in_features, self.out_features, bias)
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise _fp8lm.Error(f"{self.name}: input's last dimension {x.shape[-1]} is not "
                               f"in_features {self.in_features}")
        training = torch.is_grad_enabled() and (
            x.requires_grad or self.weight.requires_grad or
            (self.bias is not None and self.bias.requires_grad))
        return _LinearFunction.apply(x, self.weight, self.bias, self, training)

    @property
    def fp8_meta(self) -> Dict[str, Dict[str, Any]]:
        """Its FP8 slots (input, weight, output, grad_output, grad_input): {slot: {scale,
        scale_inv, amax_history, saturated_fraction, flushed_fraction}}."""
        return self._impl.fp8_meta()

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _linear_like(name, child):
    """An fp8lm Linear in place of a torch.nn.Linear or a Hugging Face Conv1D, sharing its
    parameters (an optimizer made before keeps working)."""
    if isinstance(child, torch.nn.Linear):
        in_f, out_f, transposed = child.in_features, child.out_features, False
    else:  # transformers.pytorch_utils.Conv1D: y = x W + b, W [in, out]
        in_f, out_f, transposed = child.weight.shape[0], child.nf, True
    new = Linear.__new__(Linear)
    torch.nn.Module.__init__(new)
    new.in_features, new.out_features = in_f, out_f
    new.weight = child.weight
    new.bias = child.bias
    new.weight_transposed = transposed
    new.name = name
    new._impl = _fp8lm._Linear(name, in_f, out_f, child.bias is not None)
    return new


def _convertible(module):
    return type(module) is torch.nn.Linear or (
        type(module).__name__ == "Conv1D" and hasattr(module, "nf"))


def convert(module: torch.nn.Module, skip: Sequence[str] = ()) -> torch.nn.Module:
    """Swaps every torch.nn.Linear (and Hugging Face Conv1D) in module for an
    fp8lm.torch.Linear with the same parameters, in place; returns module. skip: glob
    patterns over module names (e.g. "lm_head") to leave as they are."""
    if _convertible(module):
        return _linear_like("linear", module)
    for name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if _convertible(child) and not any(fnmatch.fnmatch(full, p) for p in skip):
                setattr(parent, child_name, _linear_like(full, child))
    return module


def fp8_state(model: torch.nn.Module) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """Every fp8lm.torch.Linear's FP8 slots, by module name: {name: {slot: {scale,
    scale_inv, amax_history, saturated_fraction, flushed_fraction}}}."""
    return {name: m.fp8_meta for name, m in model.named_modules() if isinstance(m, Linear)}
