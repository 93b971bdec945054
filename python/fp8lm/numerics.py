"""fp8lm.quantize and fp8lm.formats: tensors cast as TE's recipes cast them, through the
engine's own quantizers, and the element formats code by code."""
import json
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from fp8lm import _fp8lm
from fp8lm.recipe import (DelayedScaling, Float8CurrentScaling, RECIPES, _fp8_format,
                          settings_of)

ROLES = ("input", "weight", "grad_output")


def as_float32(x, what="x"):
    """x as a C-contiguous float32 array in host memory: numpy arrays and CPU torch tensors
    that already are pass without a copy."""
    if hasattr(x, "detach") and hasattr(x, "device"):  # a torch.Tensor
        if x.device.type != "cpu":
            raise _fp8lm.Error(f"{what}: a tensor on {x.device}; fp8lm takes CPU tensors")
        return x.detach().float().contiguous()  # each a no-op where it already holds
    a = np.asarray(x)
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=np.float32)
    return a


def quantize(x: Any, recipe: Any = None, *, role: str = "input", columnwise: bool = False,
             format: Optional[str] = None, scale: Optional[float] = None, seed: int = 0,
             saturate: bool = True) -> _fp8lm.QuantizedTensor:
    """Quantizes x (a numpy array or CPU torch.Tensor; float32 passes without a copy) as
    `recipe` quantizes a GEMM operand in `role` ("input", "weight" or "grad_output").

    - No recipe: a plain per-tensor cast, codes = cast(x * scale) in `format` ("e4m3",
      "e5m2" or "e2m1"; scale 1 by default), as `fp8lm fp8 encode --scale` does.
    - DelayedScaling: the cast a slot makes at its current `scale` (TE starts at 1); the
      format is the recipe's for the role (HYBRID: E5M2 for grad_output).
    - Float8CurrentScaling: the scale from x's own amax (and the margin).
    - Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling: the recipe's blocks for the
      role along the rows (columnwise=False, the row-wise copy) or down the columns
      (columnwise=True), over x flattened to [rows, last dimension]; NVFP4 gradients are
      rounded stochastically with draws keyed by `seed`, and its column-wise copies of inputs
      and gradients take the Hadamard transform first.

    Returns a QuantizedTensor: codes, scale_inv (per tensor or per block), amax,
    dequantize()."""
    if role not in ROLES:
        raise _fp8lm.Error(f"role '{role}': expected input, weight or grad_output")
    x = as_float32(x)
    if recipe is None:
        return _fp8lm._quantize_per_tensor(x, format or "e4m3", 1.0 if scale is None else scale,
                                           0, saturate)
    if not isinstance(recipe, RECIPES):
        settings_of(recipe)  # raises the TypeError naming what is expected
    if isinstance(recipe, (DelayedScaling, Float8CurrentScaling)):
        fmt = _fp8_format(recipe.fp8_format)
        tensor_format = "e5m2" if fmt == "hybrid" and role == "grad_output" else "e4m3"
        if format is not None and format != tensor_format:
            raise _fp8lm.Error(f"format '{format}': this recipe casts {role} as {tensor_format}")
        if isinstance(recipe, Float8CurrentScaling):
            if scale is not None:
                raise _fp8lm.Error("Float8CurrentScaling takes its scale from the tensor: "
                                   "drop scale")
            return _fp8lm._quantize_per_tensor(x, tensor_format, None, recipe.margin, saturate)
        return _fp8lm._quantize_per_tensor(x, tensor_format, 1.0 if scale is None else scale,
                                           0, saturate)
    if scale is not None or format is not None or not saturate:
        raise _fp8lm.Error(f"{type(recipe).__name__} sets each block's scale and the format "
                           "itself: drop scale, format and saturate")
    return _fp8lm._quantize_blocks(x, json.dumps(settings_of(recipe)), role, columnwise,
                                   int(seed))


@dataclass(frozen=True)
class FormatInfo:
    """One element format: its bit fields, its limits and every code's value."""
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float            # the largest finite value
    min_normal: float     # the smallest positive normal value (E8M0: the smallest value)
    min_subnormal: float  # the smallest positive value
    values: np.ndarray    # values[code] for every code (256; E2M1: 16); NaN where a code is

    def encode(self, x: Any, saturate: bool = True) -> np.ndarray:
        """Codes of x (scale 1), as the engine encodes: E4M3/E5M2 and E2M1 round to nearest
        even (E2M1 saturating at 6); E8M0 rounds up, the MX scale rule."""
        return _fp8lm._encode(as_float32(x), self.name, saturate)

    def decode(self, codes: Any) -> np.ndarray:
        """The values of codes (any integer array)."""
        return self.values[np.asarray(codes, dtype=np.int64)]


def _format_info(name, exponent_bits, mantissa_bits, bias):
    values = _fp8lm._format_values(name)
    values.setflags(write=False)
    finite = values[np.isfinite(values)]
    positive = finite[finite > 0]
    min_normal = 2.0 ** (1 - bias) if mantissa_bits else float(positive.min())
    return FormatInfo(name, exponent_bits, mantissa_bits, bias, float(finite.max()), min_normal,
                      float(positive.min()), values)


formats = {
    "e4m3": _format_info("e4m3", 4, 3, 7),
    "e5m2": _format_info("e5m2", 5, 2, 15),
    "e2m1": _format_info("e2m1", 2, 1, 1),
    "e8m0": _format_info("e8m0", 8, 0, 127),
}
"""Each element format by name: e4m3, e5m2 (FP8), e2m1 (NVFP4's values), e8m0 (MX scales)."""

