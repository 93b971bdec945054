#!/usr/bin/env python3
"""A model, not a measurement: the expected step time and scaling efficiency of data-parallel
training of d2048/12L (605M parameters) on 8, 64 and 512 H200s, from

- the bytes each rank all-reduces per step, per parameter, as bench/data_parallel_bench.py
  measured them for FP32 and for BF16 gradients (--grad-reduce bf16) (--measured its --json
  output; 4 and 2 bytes without it), scaled to d2048/12L's parameters;
- ring all-reduce time = 2 (N-1)/N x bytes / link bandwidth (per rank: 400 Gb/s = 50 GB/s,
  3.2 Tb/s = 400 GB/s);
- compute time per step from stated H200 figures: dense BF16 989 TFLOP/s and FP8 1979 TFLOP/s
  (NVIDIA's H200 SXM datasheet) at a stated 40% model FLOPs utilization, for 16 sequences of
  1024 tokens per GPU; FLOPs = 6 x parameters x tokens + causal attention 6 x layers x seq x
  d_model per token (bench/cpu_bench.py's count).

Step time = compute + all-reduce (no overlap: --grad-bucket-mb 0) and = max(compute,
all-reduce) (fully overlapped with backward: the bound fp8lm's buckets approach, the last
bucket's all-reduce aside); efficiency = compute / step.

Usage: bench/scaling_model.py [--measured dp.json]
"""
import argparse
import json

D, L, F, V = 2048, 12, 8192, 256
PARAMS = L * (4 * D * D + 2 * D * F + 4 * D + F + D) + V * D + 1024 * D + 2 * D  # + biases, norms, positions
MATMUL_PARAMS = L * (4 * D * D + 2 * D * F) + V * D
SEQ, SEQS_PER_GPU = 1024, 16
PEAK = {"bf16": 989e12, "fp8": 1979e12}
MFU = 0.40
LINKS = {"400 Gb/s": 50e9, "3.2 Tb/s": 400e9}
RANKS = (8, 64, 512)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--measured", help="bench/data_parallel_bench.py --json output")
    a = p.parse_args()
    per_param = {"FP32": 4.0, "BF16": 2.0}
    source = "4 and 2 bytes per parameter, not measured"
    if a.measured:
        with open(a.measured) as f:
            runs = json.load(f)
        for name, key in (("FP32", "two_ranks_one_thread"), ("BF16", "bf16_gradients")):
            per_param[name] = max(r[key]["comm_bytes_per_step"] / r["parameters"] for r in runs)
        source = (f"measured by bench/data_parallel_bench.py: {per_param['FP32']:.3f} and "
                  f"{per_param['BF16']:.3f} bytes per parameter per step")
    tokens = SEQ * SEQS_PER_GPU
    flops = 6 * MATMUL_PARAMS * tokens + 6 * L * SEQ * D * tokens
    compute = {k: flops / (MFU * v) for k, v in PEAK.items()}
    print(f"d2048/12L: {PARAMS / 1e6:.0f}M parameters; gradients all-reduced per step per rank: "
          f"{per_param['FP32'] * PARAMS / 1e9:.2f} GB in FP32, {per_param['BF16'] * PARAMS / 1e9:.2f} GB "
          f"in BF16 ({source}); {tokens} tokens per GPU per step; compute "
          f"{1e3 * compute['bf16']:.0f} ms (BF16) / {1e3 * compute['fp8']:.0f} ms (FP8) per step at "
          f"{MFU:.0%} MFU\n")
    print("| GPUs | link per GPU | gradients | all-reduce | BF16 step (no overlap / overlapped) | "
          "BF16 efficiency | FP8 step (no overlap / overlapped) | FP8 efficiency |")
    print("|---|---|---|---|---|---|---|---|")
    for n in RANKS:
        for link, bw in LINKS.items():
            for grads, bytes_per_param in per_param.items():
                comm = 2 * (n - 1) / n * bytes_per_param * PARAMS / bw
                cells = []
                for k in ("bf16", "fp8"):
                    c = compute[k]
                    serial, overlapped = c + comm, max(c, comm)
                    cells.append(f"{1e3 * serial:.0f} / {1e3 * overlapped:.0f} ms")
                    cells.append(f"{c / serial:.0%} / {c / overlapped:.0%}")
                print(f"| {n} | {link} | {grads} | {1e3 * comm:.0f} ms | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
