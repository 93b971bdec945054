"""fp8lm: FP8 training with Transformer Engine's recipes, emulated exactly on any x86-64 CPU.

    import fp8lm
    q = fp8lm.quantize(x, fp8lm.MXFP8BlockScaling())          # codes, scales, dequantize()
    run = fp8lm.Training(precision="fp8", steps=120)           # `fp8lm train`, a step at a time
    model = fp8lm.Model.load("runs/demo")                      # generate, logits, eval
    import fp8lm.torch                                         # TE's recipes in a torch model

`python -m fp8lm ARGS` runs the command-line tool.
"""
from fp8lm._fp8lm import Error, QuantizedTensor, StepStats, TrainResult, __version__
from fp8lm.engine import Model, Tokenizer, Training
from fp8lm.numerics import FormatInfo, formats, quantize
from fp8lm.recipe import (DelayedScaling, Float8BlockScaling, Float8CurrentScaling, Format,
                          MXFP8BlockScaling, NVFP4BlockScaling, QParams)

# Errors and results print as fp8lm.Error, fp8lm.StepStats, ... (where users meet them).
for _type in (Error, QuantizedTensor, StepStats, TrainResult):
    _type.__module__ = "fp8lm"
del _type

__all__ = [
    "Error", "QuantizedTensor", "StepStats", "TrainResult", "__version__", "Model", "Tokenizer",
    "Training", "FormatInfo", "formats", "quantize", "DelayedScaling", "Float8BlockScaling",
    "Float8CurrentScaling", "Format", "MXFP8BlockScaling", "NVFP4BlockScaling", "QParams"
]
