#!/usr/bin/env python3
"""The emulated recipes' speed against our BF16 (issue 14, point 6): bench_train's step time for
bf16 and each FP8 recipe on the same model, batch and threads, the ratio to BF16's step (goal:
every emulated recipe within 1.25x of it), and the share of each step spent outside GEMM
calls (casts, norms, attention, optimizer). Runs alternate so that drift on a shared VM hits
every recipe alike; the median of --rounds is reported, and beside it the ratio of the fastest
steps (each run's fastest step, the best over rounds): on a shared VM whose neighbours slow
some steps, the least disturbed measure of what each step costs.

Usage: bench/recipe_bench.py [--build build/cpu] [--configs demo,512/6/256] [--steps 6]
                             [--rounds 3] [--threads 2]
"""
import argparse
import json
import statistics
import subprocess

CONFIGS = {
    "demo": dict(vocab=128, seq_len=64, d_model=256, n_layers=4, n_heads=8, ffn=1024, batch_size=32),
    "512/6/256": dict(vocab=256, seq_len=256, d_model=512, n_layers=6, n_heads=8, ffn=2048, batch_size=8),
}
RUNS = [("bf16", "bf16", "delayed"), ("fp8 delayed", "fp8", "delayed"),
        ("fp8 current", "fp8", "current"), ("block", "fp8", "block"), ("mxfp8", "fp8", "mxfp8"),
        ("nvfp4", "fp8", "nvfp4")]


def bench(build, cfg, precision, recipe, steps, threads):
    args = [f"{build}/bench/bench_train", f"--precision={precision}", f"--recipe={recipe}",
            f"--steps={steps}", "--warmup-steps=2", f"--threads={threads}"]
    args += [f"--{k.replace('_', '-')}={v}" for k, v in cfg.items()]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/cpu")
    ap.add_argument("--configs", default="demo,512/6/256")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    for name in a.configs.split(","):
        cfg = CONFIGS[name]
        times = {r[0]: [] for r in RUNS}
        fastest = {r[0]: [] for r in RUNS}
        outside = {r[0]: [] for r in RUNS}
        for _ in range(a.rounds):
            for label, precision, recipe in RUNS:
                j = bench(a.build, cfg, precision, recipe, a.steps, a.threads)
                times[label].append(j["seconds_per_step"])
                fastest[label].append(j["fastest_step_seconds"])
                outside[label].append(1 - j["gemm_seconds_per_step"] / j["seconds_per_step"])
        base = statistics.median(times["bf16"])
        fastest_base = min(fastest["bf16"])
        print(f"\n{name}: batch {cfg['batch_size']} x seq {cfg['seq_len']}, {a.threads} threads, "
              f"median of {a.rounds} rounds")
        print(f"{'recipe':<12} {'s/step':>8} {'vs bf16':>8} {'goal':>6} {'outside GEMMs':>14} "
              f"{'fastest step':>13} {'vs bf16':>8}")
        for label, _, _ in RUNS:
            t = statistics.median(times[label])
            ratio = t / base
            goal = "" if label == "bf16" else ("ok" if ratio <= 1.25 else "missed")
            best = min(fastest[label])
            print(f"{label:<12} {t:>8.3f} {ratio:>7.2f}x {goal:>6} "
                  f"{statistics.median(outside[label]):>13.0%} {best:>13.3f} "
                  f"{best / fastest_base:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
