#!/usr/bin/env python3
"""Two runs of the same training (the same seed, flags and steps) on two backends, side by side:
each run's metrics.jsonl loss every --every steps and at the last, the largest gap in the first
20 steps (where the runs have barely diverged: the first step agrees to about 1e-3 of the
loss), and the mean of the last 50 steps' losses (summary.json's final_loss). Exit status 0
when those means agree within --tolerance of the reference's plus --floor (a trained demo's
loss is near zero, where relative gaps mean little), 1 when they do not, 2 when a run cannot be
read. scripts/gpu-check compares the demo on the GPU with the CPU this way.

The defaults are a first bound, not a measured one: the backends round differently from the
first step on (the GPU's attention is BF16 inside), so the curves drift apart as training
amplifies that; FP8 and BF16 runs of the demo on one CPU end within about 0.4% of each other
over 60 steps (1.5084 and 1.5048), and a GPU run should be no further from the CPU's than a
change of precision is. The first GPU run is to set them from what it measures.

Usage: tools/loss_curves.py REFERENCE_RUN OTHER_RUN [--every 20] [--tolerance 0.1]
                            [--floor 0.02] [--names cpu,gpu]
"""
import argparse
import json
import math
import os
import sys


def losses(run):
    """step -> loss of the run's finite, unskipped steps."""
    out = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            loss = record.get("loss")
            if loss is not None and math.isfinite(loss):
                out[record["step"]] = loss
    return out


def tail_mean(curve, n=50):
    steps = sorted(curve)[-n:]
    return sum(curve[s] for s in steps) / len(steps) if steps else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("reference")
    p.add_argument("other")
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--tolerance", type=float, default=0.1)
    p.add_argument("--floor", type=float, default=0.02)
    p.add_argument("--names", default="reference,other")
    a = p.parse_args()
    names = a.names.split(",")
    try:
        ref, other = losses(a.reference), losses(a.other)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read the runs' metrics.jsonl: {e}", file=sys.stderr)
        return 2
    common = sorted(set(ref) & set(other))
    if not common:
        print("error: the runs share no step with a finite loss", file=sys.stderr)
        return 2
    print(f"| step | {names[0]} loss | {names[1]} loss | difference |")
    print("|---|---|---|---|")
    for s in common:
        if s % a.every == 0 or s == common[0] or s == common[-1]:
            print(f"| {s} | {ref[s]:.4f} | {other[s]:.4f} | {other[s] - ref[s]:+.4f} |")
    early = max(abs(other[s] - ref[s]) for s in common[:20])
    mean_ref, mean_other = tail_mean(ref), tail_mean(other)
    allowed = a.tolerance * mean_ref + a.floor
    agree = abs(mean_other - mean_ref) <= allowed
    print(f"largest gap in the first {min(20, len(common))} common steps: {early:.4f}")
    print(f"mean of the last 50 losses: {names[0]} {mean_ref:.4f}, {names[1]} {mean_other:.4f} "
          f"(allowed gap {allowed:.4f}): {'agree' if agree else 'DIFFER'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
