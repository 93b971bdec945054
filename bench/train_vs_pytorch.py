#!/usr/bin/env python3
"""Training-step throughput of fp8lm per precision beside the PyTorch peer (tools/torch_gpt_peer.py,
Debian's python3-torch: FP32 and BF16 autocast) on the same model and batch, in one run.

Usage: bench/train_vs_pytorch.py [--build build/release] [--steps N] [--quick]
Prints a Markdown table: tokens/s, seconds per step, peak RSS, and the ratio to the PyTorch peer
(fp32 against PyTorch FP32; bf16 and fp8 against PyTorch BF16 autocast).
"""
import argparse
import json
import os
import subprocess
import sys

CONFIGS = {
    "demo": dict(vocab=128, seq_len=64, d_model=256, n_layers=4, n_heads=8, ffn=1024, batch_size=32),
    "512/6/256": dict(vocab=256, seq_len=256, d_model=512, n_layers=6, n_heads=8, ffn=2048, batch_size=8),
}
PEER_PYTHON = "/usr/bin/python3"  # Debian's interpreter, where python3-torch is installed


def flags(cfg, steps, warmup, threads):
    out = [f"--{k.replace('_', '-')}={v}" for k, v in cfg.items()]
    return out + [f"--steps={steps}", f"--warmup-steps={warmup}", f"--threads={threads}"]


def run_json(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed: {res.stderr.strip()}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/release")
    p.add_argument("--steps", type=int, default=8, help="timed steps per run")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    a = p.parse_args()
    ours = os.path.join(a.build, "bench", "bench_train")
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "torch_gpt_peer.py")
    if not os.path.exists(ours):
        sys.exit(f"error: {ours} not found; build first (scripts/build release)")
    have_torch = subprocess.run([PEER_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0

    print(f"threads {a.threads}, {a.steps} timed steps after 2 warmup steps\n")
    print("| config | engine | precision | tokens/s | s/step | peak RSS MB | vs PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for name in a.configs.split(","):
        cfg = CONFIGS[name]
        peer_tps = {}
        if have_torch:
            for prec in ("fp32", "bf16"):
                r = run_json([PEER_PYTHON, peer, f"--precision={prec}"] + flags(cfg, a.steps, 2, a.threads))
                peer_tps[prec] = r["tokens_per_s"]
                print(f"| {name} | PyTorch {r['torch']} | {prec}{' autocast' if prec == 'bf16' else ''} | "
                      f"{r['tokens_per_s']:.0f} | {r['seconds_per_step']:.3f} | {r['peak_rss_mb']:.0f} | 1.00x |")
        for prec in ("fp32", "bf16", "fp8"):
            r = run_json([ours, f"--precision={prec}"] + flags(cfg, a.steps, 2, a.threads))
            ref = peer_tps.get("fp32" if prec == "fp32" else "bf16")
            ratio = f"{r['tokens_per_s'] / ref:.2f}x" if ref else "n/a (no torch)"
            print(f"| {name} | fp8lm | {r['precision']} | {r['tokens_per_s']:.0f} | {r['seconds_per_step']:.3f} | "
                  f"{r['peak_rss_mb']:.0f} | {ratio} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
