"""Transformer Engine's recipe objects, with TE's names, fields and defaults
(transformer_engine.common.recipe): pass one to fp8lm.quantize, fp8lm.Training(recipe=...)
or fp8lm.torch.fp8_autocast(fp8_recipe=...)."""
import enum
from dataclasses import dataclass, field


class Format(enum.Enum):
    """Which FP8 format each tensor gets. E4M3: all of them. HYBRID: E4M3 forward (inputs,
    weights), E5M2 backward (gradients). E2M1: NVFP4's values."""
    E4M3 = "e4m3"
    E5M2 = "e5m2"
    HYBRID = "hybrid"
    E2M1 = "e2m1"


def _fp8_format(f):
    if not isinstance(f, Format):
        raise TypeError(f"fp8_format: expected fp8lm.Format, got {f!r}")
    if f not in (Format.E4M3, Format.HYBRID):
        raise ValueError(f"fp8_format {f.name}: expected Format.E4M3 or Format.HYBRID "
                         "(E5M2 alone would lose the forward's precision)")
    return f.value


@dataclass
class DelayedScaling:
    """Per-tensor scales from the amax history of earlier steps (TE's default recipe):
    scale = fp8_max / amax / 2^margin, amax the history's max (or its newest entry)."""
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"

    def _settings(self):
        return {"recipe": "delayed", "margin": self.margin,
                "fp8_format": _fp8_format(self.fp8_format),
                "amax_history_len": self.amax_history_len,
                "amax_compute_algo": self.amax_compute_algo}


@dataclass
class Float8CurrentScaling:
    """Per-tensor scales from each tensor's own amax, in the same step."""
    fp8_format: Format = Format.HYBRID
    margin: int = 0

    def _settings(self):
        return {"recipe": "current", "margin": self.margin,
                "fp8_format": _fp8_format(self.fp8_format)}


@dataclass
class QParams:
    """Float8BlockScaling's quantization parameters (TE's QParams)."""
    power_2_scale: bool = True
    amax_epsilon: float = 0.0


@dataclass
class Float8BlockScaling:
    """DeepSeek-V3's recipe: E4M3 with an FP32 scale per 1x128 tile (inputs, gradients) or
    128x128 block (weights)."""
    fp8_format: Format = Format.E4M3
    fp8_quant_fwd_inp: QParams = field(default_factory=QParams)
    fp8_quant_fwd_weight: QParams = field(default_factory=QParams)
    fp8_quant_bwd_grad: QParams = field(default_factory=QParams)

    def _settings(self):
        q = self.fp8_quant_fwd_inp
        if self.fp8_quant_fwd_weight != q or self.fp8_quant_bwd_grad != q:
            raise ValueError("Float8BlockScaling: fp8lm takes one QParams for inputs, weights and "
                             "gradients (TE's defaults are one); give the three the same")
        if self.fp8_format != Format.E4M3:
            raise ValueError("Float8BlockScaling: fp8lm casts every tensor in Format.E4M3")
        return {"recipe": "block", "power_2_scale": q.power_2_scale,
                "amax_epsilon": q.amax_epsilon}


@dataclass
class MXFP8BlockScaling:
    """OCP MXFP8: E4M3 values with an E8M0 (power of two) scale per 32 along the GEMM's K."""
    fp8_format: Format = Format.E4M3

    def _settings(self):
        if self.fp8_format != Format.E4M3:
            raise ValueError("MXFP8BlockScaling: fp8lm casts every tensor in Format.E4M3")
        return {"recipe": "mxfp8"}


@dataclass
class NVFP4BlockScaling:
    """NVFP4: E2M1 values, an E4M3 scale per 16 (16x16 for weights) and an FP32 tensor scale;
    a random Hadamard transform on the weight gradient's inputs and stochastic rounding of
    gradients unless disabled."""
    disable_rht: bool = False
    disable_stochastic_rounding: bool = False
    disable_2d_quantization: bool = False

    def _settings(self):
        return {"recipe": "nvfp4", "disable_rht": self.disable_rht,
                "disable_stochastic_rounding": self.disable_stochastic_rounding,
                "disable_2d_quantization": self.disable_2d_quantization}


RECIPES = (DelayedScaling, Float8CurrentScaling, Float8BlockScaling, MXFP8BlockScaling,
           NVFP4BlockScaling)


def settings_of(recipe):
    """The `fp8lm train` settings a recipe object stands for."""
    if not isinstance(recipe, RECIPES):
        raise TypeError(f"expected a recipe (fp8lm.DelayedScaling, Float8CurrentScaling, "
                        f"Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling), "
                        f"got {recipe!r}")
    return recipe._settings()
