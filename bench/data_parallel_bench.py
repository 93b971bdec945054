#!/usr/bin/env python3
"""Data parallelism on this machine (issue 13): 2 ranks of 1 thread (mpirun) against 1 rank of
2 threads, on the demo model and on d512/6L, in each precision, with the same global batch: the
tokens/s of each, the share of the 2-rank step spent waiting on collectives (the other rank's
lateness included) and the bytes each rank all-reduces per step. Then how much of the
communication backward hides: the same 2 ranks with one all-reduce after backward
(--grad-bucket-mb 0) against buckets started during backward (25 MiB, the default, and 4 MiB);
the hidden share is 1 - exposed time with buckets / time with one reduction after. Then BF16
gradients (--grad-reduce bf16: bytes and tokens/s), and --zero 1 (ZeRO-1): tokens/s, the
optimizer state each rank holds, the peak RSS of the largest rank, and under --fp8-weights the
FP8 weight all-gather's bytes and the FP32 masters each rank keeps. Prints Markdown tables and,
with --json, the figures the README's scaling model (bench/scaling_model.py) reads.

--overlap-rounds R measures the hidden share alone, better: on d512/6L, runs with one all-reduce
after backward, 25 MiB and 4 MiB buckets alternate R times (so that the machine's drift hits
each alike) and the medians are reported.

Usage: bench/data_parallel_bench.py [--build build/release] [--steps N] [--json out.json]
                                    [--overlap-rounds R]
"""
import argparse
import json
import statistics
import shutil
import subprocess
import sys

CONFIGS = {
    "demo": dict(vocab=128, seq_len=64, d_model=256, n_layers=4, n_heads=8, ffn=1024, batch_size=32),
    "512/6/256": dict(vocab=256, seq_len=256, d_model=512, n_layers=6, n_heads=8, ffn=2048, batch_size=8),
}
MPIRUN = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build/release")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--json")
    p.add_argument("--overlap-rounds", type=int, default=0)
    a = p.parse_args()
    mpirun = shutil.which("mpirun")
    if not mpirun:
        sys.exit("error: mpirun not found (scripts/deps installs openmpi-bin)")
    bench = f"{a.build}/bench/bench_train"
    if a.overlap_rounds:
        overlap(mpirun, bench, a)
        return
    rows, zero_rows, overlap_rows, out = [], [], [], []
    for name, cfg in CONFIGS.items():
        for precision in ("fp32", "bf16", "fp8"):
            args = [f"--{k.replace('_', '-')}={v}" for k, v in cfg.items()]
            args += [f"--steps={a.steps}", "--warmup-steps=2", f"--precision={precision}"]
            one = run([bench] + args + ["--threads=2"])
            two = run([mpirun] + MPIRUN + ["-np", "2", bench] + args + ["--threads=1"])
            zero = run([mpirun] + MPIRUN + ["-np", "2", bench] + args + ["--threads=1", "--zero=1"])
            after = run([mpirun] + MPIRUN + ["-np", "2", bench] + args + ["--threads=1", "--grad-bucket-mb=0"])
            small = run([mpirun] + MPIRUN + ["-np", "2", bench] + args + ["--threads=1", "--grad-bucket-mb=4"])
            bf16 = run([mpirun] + MPIRUN + ["-np", "2", bench] + args + ["--threads=1", "--grad-reduce=bf16"])
            fp8w = None
            if precision == "fp8":
                fp8w = run([mpirun] + MPIRUN + ["-np", "2", bench] + args +
                           ["--threads=1", "--zero=1", "--fp8-weights", "--grad-reduce=bf16"])
            exposed = after["comm_seconds_per_step"]
            hidden = lambda r: 1 - r["comm_seconds_per_step"] / exposed if exposed > 0 else 0.0
            overlap_rows.append(
                f"| {name} | {precision} | {after['tokens_per_s']:.0f} | {two['tokens_per_s']:.0f} | "
                f"{small['tokens_per_s']:.0f} | {1000 * exposed:.0f} | {1000 * two['comm_seconds_per_step']:.0f} | "
                f"{1000 * small['comm_seconds_per_step']:.0f} | {100 * hidden(two):.0f}% | {100 * hidden(small):.0f}% | "
                f"{bf16['tokens_per_s']:.0f} | {bf16['comm_bytes_per_step'] / 1e6:.2f} |")
            print(overlap_rows[-1], flush=True)
            zero_rows.append(f"| {name} | {precision} | {two['tokens_per_s']:.0f} | {zero['tokens_per_s']:.0f} | "
                             f"{two['memory_mb']['optimizer']:.1f} | {zero['memory_mb']['optimizer']:.1f} | "
                             f"{two['peak_rss_mb']:.0f} | {zero['peak_rss_mb']:.0f} | "
                             f"{zero['comm_bytes_per_step'] / 1e6:.2f} | " +
                             (f"{fp8w['tokens_per_s']:.0f} | {fp8w['comm_bytes_per_step'] / 1e6:.2f} | "
                              f"{fp8w['memory_mb']['weights']:.1f} of {zero['memory_mb']['weights']:.1f} |"
                              if fp8w else "- | - | - |"))
            share = two["comm_seconds_per_step"] / two["seconds_per_step"]
            rows.append(f"| {name} | {precision} | {one['tokens_per_s']:.0f} | {two['tokens_per_s']:.0f} | "
                        f"{two['tokens_per_s'] / one['tokens_per_s']:.2f} | {100 * share:.1f}% | "
                        f"{two['comm_bytes_per_step'] / 1e6:.2f} | "
                        f"{two['comm_bytes_per_step'] / two['parameters']:.3f} |")
            print(rows[-1], flush=True)
            out.append(dict(config=name, precision=precision, parameters=two["parameters"],
                            one_rank_two_threads=one, two_ranks_one_thread=two, two_ranks_zero1=zero,
                            one_bucket_after_backward=after, buckets_4mib=small, bf16_gradients=bf16,
                            zero1_fp8_weights=fp8w))
    print("\n| model | precision | 1 rank x 2 threads tok/s | 2 ranks x 1 thread tok/s | ratio | "
          "comm share of step | MB all-reduced per step per rank | bytes per parameter |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| model | precision | tok/s, one all-reduce after backward | 25 MiB buckets | 4 MiB buckets | "
          "ms/step waiting, after | 25 MiB | 4 MiB | hidden, 25 MiB | hidden, 4 MiB | BF16 gradients tok/s | "
          "BF16 MB per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(overlap_rows))
    print("\n| model | precision | 2 ranks tok/s | ZeRO-1 tok/s | optimizer MiB per rank | ZeRO-1 | "
          "peak RSS MiB per rank | ZeRO-1 | ZeRO-1 MB reduce-scattered + all-gathered per step | "
          "ZeRO-1 + FP8 weights + BF16 gradients tok/s | its MB per step | FP32 masters MiB per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(zero_rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def overlap(mpirun, bench, a):
    """The hidden share on d512/6L: bucket sizes alternated, medians of R rounds."""
    cfg = CONFIGS["512/6/256"]
    print("| precision | bucket | tok/s | ms/step waiting on collectives | step ms | hidden |")
    print("|---|---|---|---|---|---|")
    for precision in ("fp32", "fp8"):
        args = [f"--{k.replace('_', '-')}={v}" for k, v in cfg.items()]
        args += [f"--steps={a.steps}", "--warmup-steps=2", f"--precision={precision}", "--threads=1"]
        runs = {mb: [] for mb in (0, 25, 4)}
        for _ in range(a.overlap_rounds):
            for mb in runs:
                runs[mb].append(run([mpirun] + MPIRUN + ["-np", "2", bench] + args + [f"--grad-bucket-mb={mb}"]))
        median = lambda mb, key: statistics.median(r[key] for r in runs[mb])
        after = median(0, "comm_seconds_per_step")
        for mb in runs:
            waited = median(mb, "comm_seconds_per_step")
            label = "one, after backward" if mb == 0 else f"{mb} MiB"
            print(f"| {precision} | {label} | {median(mb, 'tokens_per_s'):.0f} | {1000 * waited:.0f} | "
                  f"{1000 * median(mb, 'seconds_per_step'):.0f} | "
                  f"{'-' if mb == 0 else f'{100 * (1 - waited / after):.0f}%'} |", flush=True)


if __name__ == "__main__":
    main()
