"""A Hugging Face GPT-2 fine-tuned under TE's MXFP8 recipe on a CPU: fp8lm.torch.convert swaps
its Conv1D projections for fp8lm Linears, whose GEMMs quantize inputs, weights and output
gradients in 1x32 blocks with E8M0 scales exactly as a Blackwell GPU's MXFP8 would.

    python3 examples/python/finetune_gpt2_mxfp8.py               # a small GPT-2, random init
    python3 examples/python/finetune_gpt2_mxfp8.py --model gpt2  # the real one, if cached

Needs transformers (pip install transformers).
"""
import argparse

import torch
import transformers

import fp8lm
import fp8lm.torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a pretrained name or path (default: a small GPT-2 config)")
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
if args.model:
    model = transformers.GPT2LMHeadModel.from_pretrained(args.model)
else:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=512, n_positions=64, n_embd=128, n_layer=2, n_head=4))
# The LM head stays in high precision, as TE's users keep it.
fp8lm.torch.convert(model, skip=["lm_head"])
converted = fp8lm.torch.fp8_state(model)
print(f"converted {len(converted)} projections to fp8lm.torch.Linear "
      f"({', '.join(list(converted)[:4])}, ...)")

text = torch.randint(0, model.config.vocab_size, (8, 33))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
recipe = fp8lm.MXFP8BlockScaling()
for step in range(args.steps):
    with fp8lm.torch.fp8_autocast(enabled=True, fp8_recipe=recipe):
        out = model(text[:, :-1], labels=text[:, :-1])
    optimizer.zero_grad()
    out.loss.backward()
    optimizer.step()
    print(f"step {step + 1}: loss {out.loss.item():.4f}")

# What one GEMM's operand looks like under MXFP8: codes and one E8M0 scale per 32 values.
fc = model.transformer.h[0].mlp.c_fc
q = fp8lm.quantize(fc.weight.t(), recipe, role="weight")
print(f"h.0.mlp.c_fc weight: {q.codes.shape} E4M3 codes, {q.scale_inv.shape} E8M0 scales "
      f"(2^{int(q.scale_inv.min()) - 127} to 2^{int(q.scale_inv.max()) - 127})")
