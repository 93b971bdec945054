#!/usr/bin/env python3
"""Every recipe on real text against BF16 (issue 14): the same byte-level model, seed and data
under bf16, the per-tensor FP8 recipes (delayed, current), the block-scaled ones (block, mxfp8,
nvfp4) and NVFP4 with each of its features switched off in turn and all together, then each
run's validation loss against BF16's. The corpus defaults to Vim's documentation (Debian's
vim-runtime: 9.5 MB of English prose and examples), concatenated in name order.

Usage: bench/recipe_validation.py [--build build/cpu] [--steps 300] [--corpus FILE]
                                  [--threads 2] [--seed 1] [--only bf16,mxfp8,...]

Columns: val loss (the run's held-out 10%), vs bf16 (val loss / BF16's - 1), goal (issue 14:
delayed, current, block, mxfp8 within 1%; nvfp4 with its features within 3%), tokens/s.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

MODEL = dict(d_model=256, n_layers=4, n_heads=8, ffn=1024, seq_len=128, batch_size=16)
RUNS = [
    ("bf16", ["--precision", "bf16"], None),
    ("delayed", ["--precision", "fp8", "--recipe", "delayed"], 0.01),
    ("current", ["--precision", "fp8", "--recipe", "current"], 0.01),
    ("block", ["--precision", "fp8", "--recipe", "block"], 0.01),
    ("mxfp8", ["--precision", "fp8", "--recipe", "mxfp8"], 0.01),
    ("nvfp4", ["--precision", "fp8", "--recipe", "nvfp4"], 0.03),
    ("nvfp4 -rht", ["--precision", "fp8", "--recipe", "nvfp4", "--disable-rht"], None),
    ("nvfp4 -sr", ["--precision", "fp8", "--recipe", "nvfp4", "--disable-stochastic-rounding"], None),
    ("nvfp4 -2d", ["--precision", "fp8", "--recipe", "nvfp4", "--disable-2d-quantization"], None),
    ("nvfp4 -all", ["--precision", "fp8", "--recipe", "nvfp4", "--disable-rht",
                    "--disable-stochastic-rounding", "--disable-2d-quantization"], None),
]


def corpus(path):
    if path:
        return path
    files = sorted(glob.glob("/usr/share/vim/vim*/doc/*.txt"))
    if not files:
        sys.exit("no corpus: install vim-runtime or pass --corpus FILE")
    out = os.path.join(tempfile.gettempdir(), "fp8lm_vimdoc.txt")
    with open(out, "wb") as o:
        for f in files:
            with open(f, "rb") as i:
                o.write(i.read())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--corpus")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="comma-separated run names")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    data = corpus(a.corpus)
    model = [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    only = set(a.only.split(",")) if a.only else None
    print(f"corpus {data} ({os.path.getsize(data) / 1e6:.1f} MB) · d{MODEL['d_model']}/"
          f"{MODEL['n_layers']}L/seq{MODEL['seq_len']}/batch{MODEL['batch_size']} · "
          f"{a.steps} steps · seed {a.seed}\n", flush=True)
    print(f"{'run':<12} {'val loss':>9} {'vs bf16':>9} {'goal':>8} {'tokens/s':>9}", flush=True)
    base = None
    for name, flags, goal in RUNS:
        if only and name not in only and name != "bf16":
            continue
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "run")
            cmd = [os.path.join(a.build, "fp8lm"), "train", "--data", data, "--steps", str(a.steps),
                   "--seed", str(a.seed), "--threads", str(a.threads), "--device", "cpu", "--out", out,
                   *model, *flags]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(out, "summary.json")) as f:
                s = json.load(f)
        loss = s["val_loss"]
        if base is None:
            base = loss
        rel = loss / base - 1
        verdict = "" if goal is None else ("ok" if rel <= goal else "MISSED")
        goal_text = "" if goal is None else f"<{goal:.0%} {verdict}"
        print(f"{name:<12} {loss:>9.4f} {rel:>+9.2%} {goal_text:>8} {s['tokens_per_s']:>9.0f}",
              flush=True)


if __name__ == "__main__":
    main()
