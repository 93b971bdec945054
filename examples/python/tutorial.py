"""The FP8 tutorial in Python: one small GPT trained on the stride task in FP32, BF16 and FP8
(delayed scaling, E4M3 everywhere vs HYBRID), its scaling factors and amax history, and
greedy generation checked against the stride.

    python3 examples/python/tutorial.py            # about a minute on 2 cores
    python3 examples/python/tutorial.py --steps 40 # quicker, less trained
"""
import argparse
import os
import tempfile

import numpy as np

import fp8lm

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=120)
args = parser.parse_args()

# The model and data of `fp8lm train`'s demo: sequences a, a+k, a+2k, ... (mod 128).
base = dict(steps=args.steps, d_model=128, n_layers=2, n_heads=4, ffn=512, seq_len=32,
            batch_size=16, seed=1)
runs = {
    "fp32": dict(precision="fp32"),
    "bf16": dict(precision="bf16"),
    "fp8 e4m3": dict(precision="fp8",
                     recipe=fp8lm.DelayedScaling(fp8_format=fp8lm.Format.E4M3,
                                                 amax_history_len=16)),
    "fp8 hybrid": dict(precision="fp8",
                       recipe=fp8lm.DelayedScaling(fp8_format=fp8lm.Format.HYBRID,
                                                   amax_history_len=16)),
}

trained = {}
for name, settings in runs.items():
    run = fp8lm.Training(base, **settings)
    while not run.done():
        stats = run.step()
    result = run.finish()
    trained[name] = run
    print(f"{name:>10}: final loss {result.final_loss:.4f} · stride accuracy "
          f"{result.stride_accuracy:.3f} · {stats.tokens_per_s:,.0f} tokens/s ({run.precision})")

# Every GEMM's FP8 slots, as TE's fp8_meta shows them: one GEMM here.
state = trained["fp8 hybrid"].fp8_state()
print(f"\nFP8 scaling of layers.0.fc1 after {args.steps} steps (HYBRID: E5M2 gradients):")
for slot, s in state["layers.0.fc1"].items():
    history = s["amax_history"]
    print(f"  {slot:>11}: scale {s['scale']:<12.6g} scale_inv {s['scale_inv']:<12.6g} "
          f"amax history (newest last) {np.array2string(history[-4:], precision=4)}")

# Greedy generation: a prompt with stride 3 continues with stride 3.
with tempfile.TemporaryDirectory() as tmp:
    trained["fp8 hybrid"].save(os.path.join(tmp, "model.safetensors"))
    model = fp8lm.Model.load(os.path.join(tmp, "model.safetensors"))
prompt = [7, 10, 13, 16, 19, 22, 25, 28]
new = model.generate([prompt], max_new_tokens=8)[0]
want = [(prompt[-1] + 3 * (i + 1)) % 128 for i in range(8)]
print(f"\ngenerate {prompt} -> {new}: {'keeps' if new == want else 'breaks'} the stride")
