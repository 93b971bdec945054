#!/usr/bin/python3
"""What the Python layer costs (issue 33), as ratios against the C++ in the same run:

- fp8lm.Training.step() on the demo (`fp8lm train`'s defaults): the Python layer's own cost,
  the wall time around each step() call against the step's time on the trainer's clock
  (StepStats.step_seconds; the steps that also take a held-out loss left out), and the
  training time (the trainer's clock, all steps) of a Python process against an
  `fp8lm train` process, alternated REPEATS times: the medians and their ratio (goal: Python
  within 3%).
- fp8lm.quantize of a 4096x4096 float32 tensor to E4M3 at a per-tensor scale against
  bench_quantize's BM_quantize/<best ISA>/64 MiB, the same cast in C++ (goal: within 10%).

Usage: PYTHONPATH=build/release/python bench/python_overhead.py [--build build/release]
       [--repeats 5] [--steps 120]
Prints one line per figure and a JSON line last. Run it on a quiet machine."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import fp8lm

TRAIN_PY = """
import json, sys, time, fp8lm
run = fp8lm.Training(steps=int(sys.argv[1]), precision=sys.argv[2])
wall = inner = 0.0
while not run.done():
    t0 = time.perf_counter()
    s = run.step()
    if s.val_loss is None:
        wall += time.perf_counter() - t0
        inner += s.step_seconds
print(json.dumps({"seconds": s.seconds, "wall": wall, "inner": inner}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--precision", default="auto")
    args = ap.parse_args()
    cli = os.path.join(args.build, "fp8lm")

    cli_s, py_s, layer = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            out = os.path.join(tmp, f"run{i}")
            subprocess.run([cli, "train", "--steps", str(args.steps), "--precision",
                            args.precision, "--out", out], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cli_s.append(json.load(open(os.path.join(out, "summary.json")))["seconds"])
            r = json.loads(subprocess.run([sys.executable, "-c", TRAIN_PY, str(args.steps),
                                           args.precision], check=True, capture_output=True,
                                          text=True).stdout)
            py_s.append(r["seconds"])
            layer.append(r["wall"] / r["inner"] - 1)
    train_ratio = statistics.median(py_s) / statistics.median(cli_s)
    print(f"demo, {args.steps} steps, --precision {args.precision}: the Python layer's own cost "
          f"per step {statistics.median(layer) * 100:+.2f}%; training time fp8lm train "
          f"{statistics.median(cli_s):.2f} s, fp8lm.Training {statistics.median(py_s):.2f} s "
          f"(medians of {args.repeats}): Python/CLI {train_ratio:.3f}")

    x = np.random.default_rng(42).normal(0, 3, (4096, 4096)).astype(np.float32)
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        fp8lm.quantize(x, format="e4m3", scale=64.0)
        times.append(time.perf_counter() - t0)
    py_q = statistics.median(times)
    isa = "avx512" if "avx512f" in open("/proc/cpuinfo").read() else "avx2"
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        subprocess.run([os.path.join(args.build, "bench", "bench_quantize"),
                        f"--benchmark_filter=BM_quantize/{isa}/67108864$",
                        f"--benchmark_out={report.name}", "--benchmark_out_format=json",
                        "--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true"],
                       check=True, capture_output=True, text=True)
        runs = json.load(open(report.name))["benchmarks"]
    cpp_q = next(b for b in runs if b.get("aggregate_name") == "median")["real_time"]
    unit = next(b for b in runs if b.get("aggregate_name") == "median")["time_unit"]
    cpp_q *= {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    q_ratio = py_q / cpp_q
    print(f"quantize 4096x4096 to E4M3: fp8lm.quantize {py_q * 1e3:.2f} ms, C++ "
          f"BM_quantize/{isa} {cpp_q * 1e3:.2f} ms: Python/C++ {q_ratio:.3f}")
    print(json.dumps({"train_cli_s": statistics.median(cli_s),
                      "train_py_s": statistics.median(py_s),
                      "python_layer": statistics.median(layer),
                      "train_ratio": train_ratio, "quantize_py_ms": py_q * 1e3,
                      "quantize_cpp_ms": cpp_q * 1e3, "quantize_ratio": q_ratio}))


if __name__ == "__main__":
    main()
