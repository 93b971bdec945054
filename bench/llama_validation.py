#!/usr/bin/env python3
"""Llama-style blocks on real BPE-tokenized text under fp32, bf16 and fp8 (issue 15): a
byte-level BPE learned by `fp8lm tokenizer train` on Vim's documentation (Debian's
vim-runtime, each file a document), `fp8lm data prepare` shards with a held-out 5% of the
documents, then the same Llama-style model (RMSNorm, SwiGLU, rotary embeddings, 8 query heads
sharing 2 key/value heads, no biases, untied head), seed and data order under each precision;
each run's validation loss on the held-out shard against BF16's.

Usage: bench/llama_validation.py [--build build/release] [--steps 300] [--vocab 4096]
                                 [--threads 2] [--seed 1] [--only bf16,fp8,...] [--keep DIR]

Columns: val loss (held-out shard), vs bf16 (val loss / BF16's - 1), goal (issue 15: fp8
within 1% of bf16), tokens/s.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

MODEL = dict(d_model=256, n_layers=4, n_heads=8, n_kv_heads=2, ffn=704, seq_len=128,
             batch_size=16, normalization="rmsnorm", activation="swiglu", rope_theta=10000,
             bias="false", tie_embeddings="false")
RUNS = [
    ("bf16", ["--precision", "bf16"], None),
    ("fp32", ["--precision", "fp32"], None),
    ("fp8", ["--precision", "fp8", "--recipe", "delayed"], 0.01),
    ("fp8 current", ["--precision", "fp8", "--recipe", "current"], 0.01),
]


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="comma-separated run names (bf16 always runs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="keep the tokenizer, dataset and runs in this directory")
    a = ap.parse_args()
    files = sorted(glob.glob("/usr/share/vim/vim*/doc/*.txt"))
    if not files:
        sys.exit("no corpus: install vim-runtime")
    fp8lm = os.path.join(a.build, "fp8lm")
    work = a.keep or tempfile.mkdtemp(prefix="fp8lm_llama_")
    os.makedirs(work, exist_ok=True)
    tok, data = os.path.join(work, "tokenizer.json"), os.path.join(work, "data")
    if not os.path.exists(tok):
        run([fp8lm, "tokenizer", "train", "--vocab-size", str(a.vocab), "--out", tok, *files])
    if not os.path.exists(data):
        run([fp8lm, "data", "prepare", "--tokenizer", tok, "--out", data, "--val-fraction", "0.05",
             *files])
    with open(os.path.join(data, "manifest.json")) as f:
        m = json.load(f)
    model = [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    size = sum(os.path.getsize(f) for f in files)
    print(f"corpus {len(files)} files ({size / 1e6:.1f} MB) · BPE vocab {a.vocab} · "
          f"{sum(t['tokens'] for t in m['train'])} train tokens, "
          f"{m['validation']['tokens']} held out ({m['validation_documents']} documents) · "
          f"d{MODEL['d_model']}/{MODEL['n_layers']}L/{MODEL['n_heads']}h/{MODEL['n_kv_heads']}kv/"
          f"seq{MODEL['seq_len']}/batch{MODEL['batch_size']} · {a.steps} steps · seed {a.seed}\n",
          flush=True)
    print(f"{'run':<12} {'val loss':>9} {'vs bf16':>9} {'goal':>10} {'tokens/s':>9}", flush=True)
    only = set(a.only.split(",")) if a.only else None
    base = None
    for name, flags, goal in RUNS:
        if only and name not in only and name != "bf16":
            continue
        out = os.path.join(work, "run-" + name.replace(" ", "-"))
        if os.path.exists(out):
            subprocess.run(["rm", "-rf", out], check=True)
        run([fp8lm, "train", "--data", data, "--steps", str(a.steps), "--seed", str(a.seed),
             "--threads", str(a.threads), "--device", "cpu", "--out", out, *model, *flags])
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        loss = s["val_loss"]
        base = loss if base is None else base
        rel = loss / base - 1
        verdict = "" if goal is None else ("ok" if abs(rel) <= goal else "MISSED")
        goal_text = "" if goal is None else f"±{goal:.0%} {verdict}"
        print(f"{name:<12} {loss:>9.4f} {rel:>+9.2%} {goal_text:>10} {s['tokens_per_s']:>9.0f}",
              flush=True)


if __name__ == "__main__":
    main()
