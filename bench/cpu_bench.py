#!/usr/bin/env python3
"""fp8lm on this CPU, in one run: the GEMM peak per dtype, then training steps per config and
precision beside the PyTorch peer (tools/torch_gpt_peer.py on Debian's python3-torch: FP32 and
BF16 autocast) on the same model and batch, then fused against unfused kernels, then peak
memory with its breakdown at d_model 2048 / seq 512. About 20 minutes on 2 cores.

Usage: bench/cpu_bench.py [--build build/release] [--steps N] [--configs demo,512/6/256,2048/12]
                          [--no-peer] [--no-fusion-table] [--no-memory]

Columns:
  tokens/s      timed steps after warmup ones
  GFLOP/s       model FLOPs per step / step time; FLOPs = 6 * matmul params * tokens plus causal
                attention (6 * layers * seq * d_model per token: QK^T and PV, forward and backward,
                the causal half of the PaLM count)
  % peak        GFLOP/s over this machine's GEMM peak for the precision's dtype (bench_gemm at
                2048^3, best engine; fp8 runs as BF16 products, so its peak is the BF16 one)
  GEMM GF/s     2·M·N·K of every GEMM call over the time spent in those calls, and
  GEMM % peak   that over the peak: how well the GEMMs alone run at this model's shapes
  peak RSS      of the whole process (MiB)
  vs PyTorch    fp32 against PyTorch FP32; bf16 and fp8 against PyTorch BF16 autocast
"""
import argparse
import json
import os
import subprocess
import sys

CONFIGS = {
    "demo": dict(vocab=128, seq_len=64, d_model=256, n_layers=4, n_heads=8, ffn=1024, batch_size=32),
    "512/6/256": dict(vocab=256, seq_len=256, d_model=512, n_layers=6, n_heads=8, ffn=2048, batch_size=8),
    "2048/12": dict(vocab=256, seq_len=128, d_model=2048, n_layers=12, n_heads=16, ffn=8192, batch_size=2),
}
# The large config runs single steps: one warmup, one timed.
STEPS = {"2048/12": (1, 1)}
PEER_PYTHON = "/usr/bin/python3"  # Debian's interpreter, where python3-torch is installed
PEAK_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp8": "bf16"}


def flags(cfg, steps, warmup, threads):
    out = [f"--{k.replace('_', '-')}={v}" for k, v in cfg.items()]
    return out + [f"--steps={steps}", f"--warmup-steps={warmup}", f"--threads={threads}"]


def peer_environment():
    """The PyTorch peer's environment: GOMP_SPINCOUNT=1000 unless the caller set it or
    OMP_WAIT_POLICY. PyTorch's FP32 products run on OpenBLAS's own threads, which OpenMP's
    spinning workers (libgomp's default) starve when the threads fill the cores: the demo's
    PyTorch FP32 on the 2-core EPYC VM read 2645-2916 tokens/s at the default against 4873-5164
    at 1000, its BF16 autocast (oneDNN, on OpenMP alone) the same either way. fp8lm runs as a
    user's would, at the default."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return None
    return dict(os.environ, GOMP_SPINCOUNT="1000")


def run_json(cmd, env=None):
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed: {res.stderr.strip()}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def model_flops_per_step(cfg):
    d, L, T, B, V, F = (cfg[k] for k in ("d_model", "n_layers", "seq_len", "batch_size", "vocab", "ffn"))
    matmul_params = L * (4 * d * d + 2 * d * F) + V * d  # qkv, proj, fc1, fc2; the tied LM head
    tokens = B * T
    return 6.0 * matmul_params * tokens + 6.0 * L * T * d * tokens


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/release")
    p.add_argument("--steps", type=int, default=6, help="timed steps per run (small configs)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    p.add_argument("--no-peer", action="store_true", help="skip PyTorch")
    p.add_argument("--no-fusion-table", action="store_true", help="skip the fused vs unfused runs")
    p.add_argument("--no-memory", action="store_true", help="skip the memory runs (d_model 2048, seq 512)")
    a = p.parse_args()
    bench = os.path.join(a.build, "bench")
    ours, gemm = os.path.join(bench, "bench_train"), os.path.join(bench, "bench_gemm")
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "torch_gpt_peer.py")
    for exe in (ours, gemm):
        if not os.path.exists(exe):
            sys.exit(f"error: {exe} not found; build first (scripts/build release)")
    for name in a.configs.split(","):
        if name not in CONFIGS:
            sys.exit(f"error: unknown config '{name}' (expected {', '.join(CONFIGS)})")
    have_torch = not a.no_peer and subprocess.run(
        [PEER_PYTHON, "-c", "import torch"], capture_output=True).returncode == 0

    g = run_json([gemm, f"--threads={a.threads}"])
    peak = {"fp32": g["fp32"], "bf16": max(e["bf16"] for e in g["engines"].values()),
            "fp8": max(e["fp8"] for e in g["engines"].values())}
    print(f"threads {a.threads}; GEMM peak at 2048^3 (GFLOP/s): fp32 {g['fp32']:.0f}; " +
          "; ".join(f"{k}: bf16 {e['bf16']:.0f}, fp8 {e['fp8']:.0f}" for k, e in g["engines"].items()) +
          f"; engine in use: {g['chosen']}\n")

    print("| config | engine | precision | tokens/s | GFLOP/s | % peak | GEMM GF/s | GEMM % peak "
          "| peak RSS MiB | vs PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in a.configs.split(","):
        cfg = CONFIGS[name]
        warmup, steps = STEPS.get(name, (2, a.steps))
        flops = model_flops_per_step(cfg)
        peer_tps = {}
        if have_torch:
            for prec in ("fp32", "bf16"):
                r = run_json([PEER_PYTHON, peer, f"--precision={prec}"] + flags(cfg, steps, warmup, a.threads),
                             peer_environment())
                peer_tps[prec] = r["tokens_per_s"]
                gf = flops / r["seconds_per_step"] / 1e9
                print(f"| {name} | PyTorch {r['torch']} | {prec}{' autocast' if prec == 'bf16' else ''} | "
                      f"{r['tokens_per_s']:.0f} | {gf:.0f} | {100 * gf / peak[prec]:.0f}% | | | "
                      f"{r['peak_rss_mb']:.0f} | 1.00x |")
        for prec in ("fp32", "bf16", "fp8"):
            r = run_json([ours, f"--precision={prec}"] + flags(cfg, steps, warmup, a.threads))
            ref = peer_tps.get("fp32" if prec == "fp32" else "bf16")
            ratio = f"{r['tokens_per_s'] / ref:.2f}x" if ref else "n/a"
            gf = flops / r["seconds_per_step"] / 1e9
            gemm_gf = r["gemm_gflop_per_step"] / r["gemm_seconds_per_step"]
            pk = peak[PEAK_DTYPE[prec]]
            print(f"| {name} | fp8lm | {r['precision']} | {r['tokens_per_s']:.0f} | {gf:.0f} | "
                  f"{100 * gf / pk:.0f}% | {gemm_gf:.0f} | {100 * gemm_gf / pk:.0f}% | "
                  f"{r['peak_rss_mb']:.0f} | {ratio} |")
        sys.stdout.flush()

    if not a.no_fusion_table:
        fusion_table(ours, a)
    if not a.no_memory:
        memory_table(ours, a)


MEMORY_CONFIG = dict(CONFIGS["2048/12"], seq_len=512, batch_size=4)


def memory_table(ours, a):
    print("\nMemory, one training step of d_model 2048 / 12 layers / seq 512 / batch 4 (MiB; "
          "weights are the FP32 masters, casts the BF16 or FP8 copies the GEMMs use, saved the "
          "tensors kept from forward for backward, workspace the shared scratch and GEMM buffers):\n")
    print("| precision | peak RSS | weights | gradients | optimizer | casts | saved | workspace | s/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prec, extra in (("fp32", []), ("bf16", []), ("fp8", []), ("fp8", ["--fp8-weights"])):
        r = run_json([ours, f"--precision={prec}"] + flags(MEMORY_CONFIG, 1, 0, a.threads) + extra)
        m = r["memory_mb"]
        label = r["precision"] + (" --fp8-weights" if extra else "")
        print(f"| {label} | {r['peak_rss_mb']:.0f} | {m['weights']} | {m['gradients']} | "
              f"{m['optimizer']} | {m['weight_casts']} | {m['saved_activations']} | "
              f"{m['workspace']} | {r['seconds_per_step']:.1f} |")
        sys.stdout.flush()


def fusion_table(ours, a):
    print("\nFused against unfused kernels (--no-fusion), demo config, best of 3 alternating runs; "
          "traffic is the bytes the kernels read and write per step, counted per call.\n")
    print("| precision | fused tokens/s | unfused tokens/s | speedup | fused MB/step | unfused MB/step |")
    print("|---|---|---|---|---|---|")
    cfg = CONFIGS["demo"]
    for prec in ("fp32", "bf16", "fp8"):
        base = [ours, f"--precision={prec}"] + flags(cfg, a.steps, 2, a.threads)
        runs = [(run_json(base), run_json(base + ["--no-fusion"])) for _ in range(3)]
        f = max((r[0] for r in runs), key=lambda r: r["tokens_per_s"])
        u = max((r[1] for r in runs), key=lambda r: r["tokens_per_s"])
        print(f"| {f['precision']} | {f['tokens_per_s']:.0f} | {u['tokens_per_s']:.0f} | "
              f"{f['tokens_per_s'] / u['tokens_per_s']:.2f}x | {f['traffic_mb_per_step']:.0f} | "
              f"{u['traffic_mb_per_step']:.0f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
