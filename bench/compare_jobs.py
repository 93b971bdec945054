#!/usr/bin/env python3
"""How much sooner `fp8lm compare --jobs N` finishes a comparison than one run at a time: the same
comparison (by default the demo, BF16 and FP8, 2 seeds: 4 runs) at --jobs 1 and at --jobs N,
alternately over --rounds rounds, each timed whole (wall seconds from start to exit). Prints
each's median and spread ((max - min) / median) and the ratio of the two within each round (its
median), and checks that both gave the same compare.json apart from its timings ("measured").

Usage: bench/compare_jobs.py [--fp8lm build/release/fp8lm] [--jobs N] [--rounds 3]
                             [-- COMPARE FLAGS]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_FLAGS = ["--precision", "bf16,fp8", "--seeds", "2"]


def timed_compare(binary, flags, jobs, out):
    start = time.monotonic()
    res = subprocess.run([binary, "compare", *flags, "--jobs", str(jobs), "--out", out],
                         capture_output=True, text=True)
    seconds = time.monotonic() - start
    if res.returncode != 0:
        sys.exit(f"fp8lm compare --jobs {jobs} exited {res.returncode}: {res.stderr[-2000:]}")
    result = json.load(open(os.path.join(out, "compare.json")))
    result.pop("measured")
    return seconds, result


def summary(xs):
    m = statistics.median(xs)
    return f"median {m:.2f} s, spread {(max(xs) - min(xs)) / m:.0%}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp8lm", default="build/release/fp8lm")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("flags", nargs="*", help="compare's flags (default: %(default)s)",
                    default=DEFAULT_FLAGS)
    a = ap.parse_args()
    if a.jobs < 2 or a.rounds < 1:
        sys.exit("--jobs must be 2 or more and --rounds 1 or more")
    cpus = len(os.sched_getaffinity(0))
    print(f"fp8lm compare {' '.join(a.flags)}: --jobs 1 against --jobs {a.jobs}, {a.rounds} rounds, "
          f"{cpus} CPUs")
    one, many, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            t1, j1 = timed_compare(a.fp8lm, a.flags, 1, os.path.join(tmp, f"one-{r}"))
            tn, jn = timed_compare(a.fp8lm, a.flags, a.jobs, os.path.join(tmp, f"many-{r}"))
            if j1 != jn:
                sys.exit(f"round {r + 1}: compare.json differs between --jobs 1 and --jobs {a.jobs}")
            one.append(t1)
            many.append(tn)
            ratios.append(t1 / tn)
            print(f"round {r + 1}: --jobs 1 {t1:.2f} s, --jobs {a.jobs} {tn:.2f} s, {t1 / tn:.2f}x")
    print(f"--jobs 1: {summary(one)}")
    print(f"--jobs {a.jobs}: {summary(many)}")
    print(f"--jobs {a.jobs} finishes {statistics.median(ratios):.2f}x sooner (median of the rounds' "
          f"ratios; {min(ratios):.2f}-{max(ratios):.2f}x); the same compare.json in every round")


if __name__ == "__main__":
    main()
