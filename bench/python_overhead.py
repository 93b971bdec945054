#!/usr/bin/python3
"""What the Python layer costs (issue 33), as ratios against the C++ in the same run:

- fp8lm.Training: the demo (`fp8lm train`'s defaults) run by the command line and by a Python
  loop of step() calls, each a whole process, for STEPS and for STEPS/6 steps, alternated
  REPEATS times; a step's time is the difference over the steps between them (start-up and
  the final evaluation cancel out); the medians and their ratio (goal: Python within 3%).
- fp8lm.quantize of a 4096x4096 float32 tensor to E4M3 at a per-tensor scale against
  bench_quantize's BM_quantize/<best ISA>/64 MiB, the same cast in C++ (goal: within 10%).

Usage: PYTHONPATH=build/release/python bench/python_overhead.py [--build build/release]
       [--repeats 3] [--steps 120]
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
import sys, fp8lm
run = fp8lm.Training(steps=int(sys.argv[1]), precision=sys.argv[2])
while not run.done():
    run.step()
run.finish()
"""


def wall(cmd, env=None):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--precision", default="auto")
    args = ap.parse_args()
    cli = os.path.join(args.build, "fp8lm")

    # Per step: the wall time of STEPS steps less that of SHORT steps, each a whole process,
    # so that start-up, imports and the final evaluation cancel out; what is left is the steps
    # (held-out passes on the same schedule included) and whatever each side adds per step.
    short = max(1, args.steps // 6)
    cli_s, py_s = [], []
    for _ in range(args.repeats):
        per = {}
        for n in (args.steps, short):
            per[("cli", n)] = wall([cli, "train", "--no-save", "--steps", str(n), "--precision",
                                    args.precision])
            per[("py", n)] = wall([sys.executable, "-c", TRAIN_PY, str(n), args.precision],
                                  env=dict(os.environ))
        cli_s.append((per[("cli", args.steps)] - per[("cli", short)]) / (args.steps - short))
        py_s.append((per[("py", args.steps)] - per[("py", short)]) / (args.steps - short))
    train_ratio = statistics.median(py_s) / statistics.median(cli_s)
    print(f"demo, --precision {args.precision}, a step ({args.steps} steps less {short}, whole "
          f"processes): fp8lm train {statistics.median(cli_s) * 1e3:.1f} ms, fp8lm.Training "
          f"{statistics.median(py_s) * 1e3:.1f} ms (median of {args.repeats}): Python/CLI "
          f"{train_ratio:.3f}")

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
    print(json.dumps({"step_cli_s": statistics.median(cli_s), "step_py_s": statistics.median(py_s),
                      "train_ratio": train_ratio, "quantize_py_ms": py_q * 1e3,
                      "quantize_cpp_ms": cpp_q * 1e3, "quantize_ratio": q_ratio}))


if __name__ == "__main__":
    main()
